"""Fetch the raw archive: http(s)://, file://, a plain path, or any URL of the
filesystems DVC reads (s3://, gs://, hdfs://, ssh://, ...; through fsspec, with the
matching ``dvc[...]`` extra installed).

The file is streamed to a partial file beside the data (``data/.downloads/``)
with a progress bar and its md5 computed on the way (over HTTP, once the file is whole:
a resumed file starts with bytes of an earlier run), checked (every member of the
gzip tar read to the end, every record file there with a whole number of records;
the md5) and only then renamed to its final name, so a file under the final name is
always a complete, verified archive. ``data/raw/source.json`` records what was
fetched (URL, size, md5). Transient network errors are retried with exponential
backoff, and a partial file is resumed with an HTTP range request where the server
allows it (also across runs), but only a partial file of the same URL and size.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tarfile
import urllib.parse
import zlib
from pathlib import Path, PurePosixPath
from typing import Callable, Optional

from ..files import md5_of

from ..ownership import ensure_writable, refuse_foreign
from .transfer import (CHUNK, MIRROR_HINT, DownloadError, DownloadOptions, copy_fsspec,
                       copy_local, fetch_http, local_source, sidecar)

log = logging.getLogger(__name__)


def _html_hint(head: bytes) -> str:
    """A sentence for a downloaded file that is really a web page, else nothing."""
    if head.lstrip().lower().startswith((b"<!doctype", b"<html", b"<?xml", b"<head")):
        return (" It looks like an HTML page: the server probably returned an error or login "
                "page instead of the file.")
    return ""


def check_gzip_tar(path: Path, source: str, spec=None) -> None:
    """Fail clearly unless ``path`` is a complete gzip-compressed tar archive: every member
    is read to the end (gzip's CRC and length checked), and with ``spec`` (a DatasetSpec)
    every record file of the set is there with a whole, non-zero number of records."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head[:2] != b"\x1f\x8b":
        raise DownloadError(
            f"{source} is not a gzip-compressed tar archive: expected the gzip signature "
            f"1f 8b, found {head[:16]!r}.{_html_hint(head)} {MIRROR_HINT}")
    sizes: dict[str, int] = {}
    try:
        with tarfile.open(path, "r:gz") as tf:
            for member in tf:
                # ./cifar-10-batches-bin/... (tar -C d -czf x .) is the same member
                name = str(PurePosixPath(member.name))
                if not (member.isfile() or member.isdir()):  # a link, a FIFO, a device
                    kind = ("a hard link" if member.islnk() else "a symbolic link"
                            if member.issym() else "not a regular file")
                    raise DownloadError(f"{source}: member {name} is {kind}; an archive of "
                                        f"{spec.name if spec else 'this data set'} holds "
                                        f"regular files only. {MIRROR_HINT}")
                if member.isfile():
                    if name in sizes:  # which copy would count? tar keeps the last, silently
                        raise DownloadError(f"{source}: member {name} appears twice; an archive "
                                            f"holds each file once. {MIRROR_HINT}")
                    data = tf.extractfile(member)
                    while data.read(CHUNK):
                        pass
                    sizes[name] = member.size
            while tf.fileobj.read(CHUNK):  # to gzip's end: its CRC and length are checked there
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DownloadError(
            f"{source} is not a complete gzip tar archive ({type(exc).__name__}: {exc}): the "
            f"download is truncated or damaged. {MIRROR_HINT}") from None
    if not sizes:
        raise DownloadError(f"{source} is a gzip tar archive holding no files.")
    if spec is not None and spec.format == "binary":
        for split, files in spec.splits.items():
            for name in files:
                member = f"{spec.folder}/{name}"
                size = sizes.get(member)
                if size is None:
                    raise DownloadError(f"{source}: the archive has no {member} ({split} split); "
                                        f"expected the official layout of {spec.name}. {MIRROR_HINT}")
                if size > spec.max_records_per_file * spec.record_bytes:  # a gzip bomb stops here
                    raise DownloadError(
                        f"{source}: {member} holds {size // spec.record_bytes:,} records, more "
                        f"than any file of {spec.name} ({spec.max_records_per_file:,} at most): "
                        f"the archive is not {spec.name}. {MIRROR_HINT}")
                if size == 0 or size % spec.record_bytes:
                    raise DownloadError(
                        f"{source}: {member} holds {size} bytes, not a whole number of "
                        f"{spec.record_bytes}-byte records: the archive is damaged or not "
                        f"{spec.name}. {MIRROR_HINT}")


def check_mat(path: Path, source: str) -> None:
    """Fail clearly unless ``path`` starts like a MATLAB 5.0 MAT-file (the SVHN format)."""
    with open(path, "rb") as f:
        head = f.read(128)
    if not head.startswith(b"MATLAB 5.0 MAT-file"):
        raise DownloadError(f"{source} is not a MATLAB 5.0 MAT-file: expected the header "
                            f"'MATLAB 5.0 MAT-file', found {head[:24]!r}.{_html_hint(head)} "
                            f"{MIRROR_HINT}")


def fetch(url: str, md5: Optional[str], dest: Path, partial_dir: Path,
          opts: DownloadOptions = DownloadOptions(),
          check: Callable[[Path, str], None] = check_gzip_tar) -> dict:
    """Fetch ``url`` to ``dest``, verified; nothing is left under ``dest`` on failure.
    Returns what was fetched: name, url, size, md5."""
    dest = Path(dest)
    local = local_source(url)
    if dest.exists() and not dest.is_file():  # a folder, a FIFO (hashing it would hang), a device
        raise DownloadError(f"{dest}: {'a folder' if dest.is_dir() else 'not a regular file'} "
                            f"where the download stage keeps its file {dest.name}; move it "
                            f"elsewhere (or remove it), then rerun. Nothing was changed.")
    if dest.exists():
        if md5 is not None and md5_of(dest) == md5.lower():
            log.info("%s is already here with the expected md5", dest)
            return {"name": dest.name, "url": url, "size": dest.stat().st_size, "md5": md5.lower()}
        if local is not None and Path(local).resolve() == dest.resolve():
            raise DownloadError(f"data.url {url} is the download stage's own output {dest}: "
                                f"fetching it again would delete the only copy. Point data.url "
                                f"at the archive's original location. Nothing was changed.")
        dest.unlink()  # with no md5 pinned, the source is fetched again: it may have changed
    partial_dir.mkdir(parents=True, exist_ok=True)
    part = partial_dir / (dest.name + ".part")
    digest = hashlib.md5()
    if local is not None:
        sidecar(part).unlink(missing_ok=True)
        copy_local(local, part, opts.progress, digest)
    elif urllib.parse.urlparse(url).scheme in ("http", "https"):
        fetch_http(url, part, opts)
        digest = None  # a resumed file: hashed whole below
    else:
        sidecar(part).unlink(missing_ok=True)
        copy_fsspec(url, part, opts.progress, digest)
    try:
        check(part, url)  # every member and record file, before the md5 is looked at
        found = digest.hexdigest() if digest is not None else md5_of(part)
        if md5 is None:
            log.warning("data.md5 is null: the archive's integrity is NOT checked. It passed "
                        "the format checks and its md5 is %s; to pin it, set data.md5: %s in "
                        "params.yaml (or `dvc exp run -S data.md5=%s`).", found, found, found)
        elif found != md5.lower():
            raise DownloadError(
                f"md5 mismatch for {url}: expected {md5.lower()}, found {found}. The file is a "
                f"complete archive in the expected layout, so data.url most likely names "
                f"another version of it; if that is the one you want, set data.md5 to {found} "
                f"(or null to skip the check).")
    except DownloadError:
        part.unlink(missing_ok=True)
        sidecar(part).unlink(missing_ok=True)
        raise
    dest.parent.mkdir(parents=True, exist_ok=True)
    size = part.stat().st_size
    os.replace(part, dest)
    sidecar(part).unlink(missing_ok=True)
    log.info("downloaded %s -> %s (%.1f MB, md5 %s)", url, dest, size / 1e6, found)
    return {"name": dest.name, "url": url, "size": size, "md5": found}


def clean_partial_dir(partial_dir: Path) -> None:
    if partial_dir.is_dir() and not any(partial_dir.iterdir()):
        shutil.rmtree(partial_dir, ignore_errors=True)


SOURCE_RECORD = "source.json"


def raw_file_names() -> set[str]:
    """Every name the download stage may leave in its folder: each data set's files and
    the record of what was fetched."""
    from .datasets import DATASETS

    names = {SOURCE_RECORD, SOURCE_RECORD + ".tmp"}
    for spec in DATASETS.values():
        names |= set(spec.files) | set(spec.optional_files)
    return names


def fetch_dataset(data, raw_dir: Path, partial_dir: Path,
                  opts: DownloadOptions = DownloadOptions()) -> list[dict]:
    """Fetch every file of ``data`` (DataParams) into ``raw_dir``, each verified, and record
    what was fetched in ``raw_dir/source.json``; another data set's files there are removed
    once these are in. A folder holding anything else is refused before anything is
    fetched or removed (``--out .`` must not empty a clone)."""
    from functools import partial

    from .datasets import get_dataset, sources

    spec = get_dataset(data.dataset)
    check = check_mat if spec.format == "svhn_mat" else partial(check_gzip_tar, spec=spec)
    files = sources(data)
    raw_dir = Path(raw_dir)
    refuse_foreign(raw_dir, raw_file_names(), "download")
    ensure_writable(raw_dir, Path(partial_dir))  # one line for a folder that cannot be made
    try:
        fetched = [fetch(url, md5, raw_dir / name, partial_dir, opts, check)
                   for url, md5, name in files]
    finally:  # a failed download leaves no empty --partial folder behind
        clean_partial_dir(partial_dir)
    wanted = {name for _, _, name in files} | {SOURCE_RECORD}
    for old in raw_dir.iterdir():  # another data set's files (the folder persists)
        if old.name not in wanted:
            old.unlink()
    record = {"dataset": spec.name, "md5_pinned": data.md5 is not None, "files": fetched}
    tmp = raw_dir / (SOURCE_RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, raw_dir / SOURCE_RECORD)
    clean_partial_dir(partial_dir)
    return fetched
