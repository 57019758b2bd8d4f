"""Fetch the raw archive: http(s)://, file:// or a plain path.

The file is streamed to a partial file beside the data (``data/.downloads/``)
with a progress bar, checked (gzip tar, md5) and only then renamed to its final
name, so a file under the final name is always a complete, verified archive.
Transient network errors are retried with exponential backoff, and a partial
file is resumed with an HTTP range request where the server allows it (also
across runs: the partial file survives an interrupted ``dvc repro``).
"""
from __future__ import annotations

import hashlib
import http.client
import logging
import os
import shutil
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tqdm import tqdm

from .errors import PipelineError

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


def md5_of(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _html_hint(head: bytes) -> str:
    """A sentence for a downloaded file that is really a web page, else nothing."""
    if head.lstrip().lower().startswith((b"<!doctype", b"<html", b"<?xml", b"<head")):
        return (" It looks like an HTML page: the server probably returned an error or login "
                "page instead of the file.")
    return ""


def check_gzip_tar(path: Path, source: str) -> None:
    """Fail clearly unless ``path`` is a readable gzip-compressed tar archive."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head[:2] != b"\x1f\x8b":
        raise DownloadError(
            f"{source} is not a gzip-compressed tar archive: expected the gzip signature "
            f"1f 8b, found {head[:16]!r}.{_html_hint(head)} {MIRROR_HINT}")
    try:
        with tarfile.open(path, "r:gz") as tf:
            if tf.next() is None:
                raise DownloadError(f"{source} is a gzip file holding an empty tar archive.")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DownloadError(
            f"{source} is gzip-compressed but not a readable tar archive ({exc}). {MIRROR_HINT}"
        ) from None


def check_mat(path: Path, source: str) -> None:
    """Fail clearly unless ``path`` starts like a MATLAB 5.0 MAT-file (the SVHN format)."""
    with open(path, "rb") as f:
        head = f.read(128)
    if not head.startswith(b"MATLAB 5.0 MAT-file"):
        raise DownloadError(f"{source} is not a MATLAB 5.0 MAT-file: expected the header "
                            f"'MATLAB 5.0 MAT-file', found {head[:24]!r}.{_html_hint(head)} "
                            f"{MIRROR_HINT}")


def _local_source(url: str) -> Optional[Path]:
    """The local path a URL names, or None for a network URL."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme in ("http", "https"):
        return None
    if parsed.scheme and len(parsed.scheme) > 1:
        raise DownloadError(
            f"data.url: unsupported scheme {parsed.scheme!r} in {url!r}; expected http://, "
            f"https://, file:// or a plain path.")
    return Path(url)


def _bar(total: Optional[int], initial: int, name: str, progress: Optional[bool]) -> tqdm:
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                desc=name, disable=None if progress is None else not progress, leave=False)


def _copy_local(src: Path, part: Path, progress: Optional[bool]) -> None:
    if not src.is_file():
        raise DownloadError(f"data.url: {src} does not exist or is not a file. {MIRROR_HINT}")
    with open(src, "rb") as fin, open(part, "wb") as fout, \
            _bar(src.stat().st_size, 0, src.name, progress) as bar:
        for chunk in iter(lambda: fin.read(CHUNK), b""):
            fout.write(chunk)
            bar.update(len(chunk))


def _http_attempt(url: str, part: Path, opts: DownloadOptions) -> None:
    """One attempt: resume ``part`` from its current size if the server allows ranges."""
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "cifar10-tutorial-pipeline"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=opts.timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # our partial file is no prefix the server knows: restart
            part.unlink()
            raise _Transient(f"HTTP 416 for a range request; restarting from zero") from None
        if exc.code >= 500 or exc.code in (408, 429):
            raise _Transient(f"HTTP {exc.code} {exc.reason}") from None
        raise DownloadError(f"could not download {url}: HTTP {exc.code} {exc.reason}. "
                            f"{MIRROR_HINT}") from None
    except (urllib.error.URLError, socket.timeout, ConnectionError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Transient(f"{type(exc).__name__}: {reason}") from None
    with resp:
        if resp.status == 206:
            start = int(resp.headers.get("Content-Range", "bytes 0-").split()[1].split("-")[0])
            if start != have:
                part.unlink()
                raise _Transient(f"server resumed at byte {start}, not {have}; restarting")
            mode = "ab"
            log.info("resuming %s at byte %d", url, have)
        else:
            mode, have = "wb", 0
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        got = have
        with open(part, mode) as f, _bar(total, have, Path(urllib.parse.urlparse(url).path).name,
                                         opts.progress) as bar:
            while True:
                try:
                    chunk = resp.read(CHUNK)
                except (socket.timeout, ConnectionError, http.client.HTTPException) as exc:
                    raise _Transient(f"connection lost after {got} bytes: "
                                     f"{type(exc).__name__}: {exc}") from None
                if not chunk:
                    break
                f.write(chunk)
                got += len(chunk)
                bar.update(len(chunk))
        if total is not None and got < total:
            raise _Transient(f"connection closed after {got} of {total} bytes")


def _fetch_http(url: str, part: Path, opts: DownloadOptions,
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


def fetch(url: str, md5: Optional[str], dest: Path, partial_dir: Path,
          opts: DownloadOptions = DownloadOptions(),
          check: Callable[[Path, str], None] = check_gzip_tar) -> Path:
    """Fetch ``url`` to ``dest``, verified; nothing is left under ``dest`` on failure."""
    dest = Path(dest)
    if dest.exists():
        if md5 is not None and md5_of(dest) == md5.lower():
            log.info("%s is already here with the expected md5", dest)
            return dest
        dest.unlink()
    partial_dir.mkdir(parents=True, exist_ok=True)
    part = partial_dir / (dest.name + ".part")
    local = _local_source(url)
    if local is not None:
        _copy_local(local, part, opts.progress)
    else:
        _fetch_http(url, part, opts)
    try:
        check(part, url)
        found = md5_of(part)
        if md5 is None:
            log.warning("data.md5 is null: the archive's integrity is NOT checked "
                        "(its md5 is %s; put that in data.md5 to check it)", found)
        elif found != md5.lower():
            raise DownloadError(
                f"md5 mismatch for {url}: expected {md5.lower()}, found {found}. The file is "
                f"corrupt or data.url names another archive; if that archive is the one you "
                f"want, set data.md5 to {found} (or null to skip the check).")
    except DownloadError:
        part.unlink(missing_ok=True)
        raise
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(part, dest)
    log.info("downloaded %s -> %s (%.1f MB)", url, dest, dest.stat().st_size / 1e6)
    return dest


def clean_partial_dir(partial_dir: Path) -> None:
    if partial_dir.is_dir() and not any(partial_dir.iterdir()):
        shutil.rmtree(partial_dir, ignore_errors=True)


def fetch_dataset(data, raw_dir: Path, partial_dir: Path,
                  opts: DownloadOptions = DownloadOptions()) -> list[Path]:
    """Fetch every file of ``data`` (DataParams) into ``raw_dir``, each verified."""
    from .datasets import get_dataset, sources

    check = check_mat if get_dataset(data.dataset).format == "svhn_mat" else check_gzip_tar
    paths = [fetch(url, md5, Path(raw_dir) / name, partial_dir, opts, check)
             for url, md5, name in sources(data)]
    clean_partial_dir(partial_dir)
    return paths
