"""How the raw archive's bytes arrive (:mod:`.download` checks them and gives them their
final name): a local path or file:// URL copied, http(s):// streamed with retries and
resumed with a range request where the server allows it, any URL of DVC's remote
filesystems through fsspec; each into a partial file, its md5 computed on the way."""
from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tqdm import tqdm

from ..errors import PipelineError
from ..files import writing

log = logging.getLogger(__name__)

CHUNK = 1 << 20
MIRROR_HINT = ("Set data.url in params.yaml to a mirror or to a local copy "
               "(file:///path/to/archive.tar.gz or a plain path), e.g. "
               "`dvc exp run -S data.url=/path/to/cifar-10-binary.tar.gz`.")


class DownloadError(PipelineError):
    """The archive could not be fetched or failed its checks."""


class _Transient(Exception):
    """A failure worth retrying (dropped connection, timeout, 5xx)."""


@dataclass(frozen=True)
class DownloadOptions:
    timeout: float = 60.0  # seconds without data before an attempt gives up
    retries: int = 5  # attempts in all, for transient errors
    backoff: float = 2.0  # first wait between attempts, doubled each time
    progress: Optional[bool] = None  # None: a bar when stderr is a terminal
    # the most bytes one file may have: the largest file of a data set here is SVHN's
    # extra_32x32.mat (about 1.3 GB); a body that goes on past this is refused
    max_bytes: int = 2 << 30


# URL schemes of DVC's remote filesystems -> the extra that installs them
DVC_EXTRAS = {"s3": "s3", "gs": "gs", "gcs": "gs", "azure": "azure", "az": "azure",
              "abfs": "azure", "hdfs": "hdfs", "webhdfs": "webhdfs", "ssh": "ssh", "sftp": "ssh",
              "oss": "oss", "webdav": "webdav", "webdavs": "webdav", "gdrive": "gdrive"}
# fsspec's own filesystems that need no extra (memory:// serves tests)
FSSPEC_BUILTIN = {"memory"}


def local_source(url: str) -> Optional[Path]:
    """The local path a URL names, or None for a network URL."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):  # another machine's file: not the local path
            raise DownloadError(
                f"data.url: {url!r} names a file on the host {parsed.netloc!r}, but file:// "
                f"reads this machine's files only; use file:///PATH or a plain path for a local "
                f"file, or an http(s):// URL to fetch it from {parsed.netloc}")
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme in ("http", "https") or parsed.scheme in DVC_EXTRAS \
            or parsed.scheme in FSSPEC_BUILTIN:
        return None
    if parsed.scheme and len(parsed.scheme) > 1:
        raise DownloadError(
            f"data.url: unsupported scheme {parsed.scheme!r} in {url!r}; expected http://, "
            f"https://, file://, a plain path, or a URL of DVC's remote filesystems "
            f"({', '.join(sorted(DVC_EXTRAS))}://).")
    return Path(url)


def copy_fsspec(url: str, part: Path, progress: Optional[bool], digest) -> None:
    """Stream ``url`` from a DVC/fsspec filesystem (s3://, gs://, hdfs://, ssh://, memory://)."""
    import fsspec

    scheme = urllib.parse.urlparse(url).scheme
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        extra = DVC_EXTRAS.get(scheme)
        hint = f"`pip install 'dvc[{extra}]'`" if extra else "its fsspec implementation"
        raise DownloadError(f"data.url: reading {scheme}:// needs {hint} ({exc}).") from None
    try:
        with fs.open(path, "rb") as fin:
            _stream(fin, part, fs.size(path), Path(path).name, progress, digest)
    except FileNotFoundError:
        raise DownloadError(f"data.url: {url} does not exist. {MIRROR_HINT}") from None
    except OSError as exc:
        raise DownloadError(f"could not read {url} ({type(exc).__name__}: {exc}). "
                            f"{MIRROR_HINT}") from None


def _bar(total: Optional[int], initial: int, name: str, progress: Optional[bool]) -> tqdm:
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                desc=name, disable=None if progress is None else not progress, leave=False)


def _stream(fin, part: Path, total: Optional[int], name: str, progress: Optional[bool],
            digest) -> None:
    """Copy the open file ``fin`` to ``part`` with a progress bar, hashing on the way."""
    with writing(part), open(part, "wb") as fout, _bar(total, 0, name, progress) as bar:
        for chunk in iter(lambda: fin.read(CHUNK), b""):
            fout.write(chunk)
            digest.update(chunk)
            bar.update(len(chunk))


def copy_local(src: Path, part: Path, progress: Optional[bool], digest) -> None:
    if not src.is_file():
        raise DownloadError(f"data.url: {src} does not exist or is not a file. {MIRROR_HINT}")
    with open(src, "rb") as fin:
        _stream(fin, part, src.stat().st_size, src.name, progress, digest)


def sidecar(part: Path) -> Path:
    """Beside a partial file: the URL and total size it is a prefix of."""
    return part.with_name(part.name + ".json")


def _partial_of(part: Path, url: str) -> int:
    """Bytes of ``part`` that may be resumed for ``url``: 0 unless its sidecar names ``url``."""
    if not part.exists():
        return 0
    try:
        meta = json.loads(sidecar(part).read_text())
    except (OSError, ValueError):
        meta = None
    if not meta or meta.get("url") != url:
        log.info("discarding %s: a partial download of another source", part)
        part.unlink()
        sidecar(part).unlink(missing_ok=True)
        return 0
    return part.stat().st_size


def _resumed(resp, url: str, part: Path, have: int) -> tuple[str, int]:
    """("ab", bytes already here) when the server resumed where ``part`` ends, ("wb", 0)
    when it sends the whole file; one line for a malformed or inconsistent answer."""
    if resp.status != 206:
        return "wb", 0
    if not have:  # nothing was asked for but the whole file
        raise DownloadError(f"{url}: the server answered 206 (a part of the file) to a "
                            f"request for the whole file; use another mirror. {MIRROR_HINT}")
    rng = resp.headers.get("Content-Range", "")
    m = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", rng.strip())
    if not m:
        raise DownloadError(f"{url}: the server's Content-Range {rng[:60]!r} is not "
                            f"'bytes START-END/SIZE'; use another mirror. {MIRROR_HINT}")
    start, full = int(m[1]), m[2]
    known = json.loads(sidecar(part).read_text()).get("size")
    if start != have or (known is not None and full != "*" and int(full) != known):
        part.unlink()
        sidecar(part).unlink(missing_ok=True)
        raise _Transient(f"server resumed at byte {start} of {full}, not {have} of "
                         f"{known}: the file changed; restarting")
    log.info("resuming %s at byte %d", url, have)
    return "ab", have


def _total(resp, url: str, have: int, opts: DownloadOptions) -> Optional[int]:
    """The file's whole size from Content-Length (None without one), checked."""
    length = resp.headers.get("Content-Length")
    if length is not None and not length.strip().isdigit():
        raise DownloadError(f"{url}: the server's Content-Length {length[:40]!r} is not a "
                            f"number of bytes; use another mirror. {MIRROR_HINT}")
    total = have + int(length) if length is not None else None
    if total is not None and total > opts.max_bytes:
        raise DownloadError(f"{url}: the server announces {total:,} bytes, more than any "
                            f"file of these data sets ({opts.max_bytes:,}); check data.url")
    return total


def _http_attempt(url: str, part: Path, opts: DownloadOptions) -> None:
    """One attempt: resume ``part`` (a prefix of the same URL and total size) from its
    current size if the server allows ranges."""
    have = _partial_of(part, url)
    req = urllib.request.Request(url, headers={"User-Agent": "cifar10-tutorial-pipeline"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=opts.timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # our partial file is no prefix the server knows: restart
            part.unlink()
            raise _Transient("HTTP 416 for a range request; restarting from zero") from None
        if exc.code >= 500 or exc.code in (408, 429):
            raise _Transient(f"HTTP {exc.code} {exc.reason}") from None
        raise DownloadError(f"could not download {url}: HTTP {exc.code} {exc.reason}. "
                            f"{MIRROR_HINT}") from None
    except (urllib.error.URLError, socket.timeout, ConnectionError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Transient(f"{type(exc).__name__}: {reason}") from None
    with resp:
        mode, have = _resumed(resp, url, part, have)
        total = _total(resp, url, have, opts)
        if mode == "wb":
            sidecar(part).write_text(json.dumps({"url": url, "size": total}))
        got = have
        name = Path(urllib.parse.urlparse(url).path).name
        with writing(part), open(part, mode) as f, _bar(total, have, name, opts.progress) as bar:
            while True:
                try:
                    chunk = resp.read(CHUNK)
                except (socket.timeout, ConnectionError, http.client.HTTPException) as exc:
                    raise _Transient(f"connection lost after {got} bytes: "
                                     f"{type(exc).__name__}: {exc}") from None
                if not chunk:
                    break
                got += len(chunk)
                if got > opts.max_bytes:  # an endless body: stop before the disk fills
                    f.close()
                    part.unlink(missing_ok=True)
                    sidecar(part).unlink(missing_ok=True)
                    raise DownloadError(f"{url}: the body goes on past {opts.max_bytes:,} bytes, "
                                        f"more than any file of these data sets; check data.url")
                f.write(chunk)
                bar.update(len(chunk))
        if total is not None and got < total:
            raise _Transient(f"connection closed after {got} of {total} bytes")


def fetch_http(url: str, part: Path, opts: DownloadOptions,
                sleep: Callable[[float], None] = time.sleep) -> None:
    last = ""
    for attempt in range(1, opts.retries + 1):
        try:
            _http_attempt(url, part, opts)
            return
        except _Transient as exc:
            last = str(exc)
            if attempt < opts.retries:
                wait = opts.backoff * 2 ** (attempt - 1)
                log.warning("download attempt %d/%d of %s failed (%s); retrying in %.1f s",
                            attempt, opts.retries, url, last, wait)
                sleep(wait)
    raise DownloadError(f"could not download {url} after {opts.retries} attempts "
                        f"(last error: {last}). The host may be unreachable. {MIRROR_HINT}")
