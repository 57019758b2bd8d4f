import hashlib
import http.server
import json
import socket
import threading
import types
from pathlib import Path

import pytest

from cifar10_tutorial.data.download import DownloadError, DownloadOptions, fetch

FAST = DownloadOptions(timeout=5, retries=3, backoff=0.01, progress=False)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def assert_nothing_left(dest, partial_dir):
    assert not dest.exists()
    assert not list(partial_dir.glob("*")) if partial_dir.exists() else True


# ----------------------------------------------------------------------------- local sources


def test_file_url_and_plain_path(archive, tmp_path):
    data = archive["path"].read_bytes()
    for i, url in enumerate([archive["path"].as_uri(), str(archive["path"])]):
        dest = tmp_path / f"raw{i}" / "cifar-10-binary.tar.gz"
        fetch(url, archive["md5"], dest, tmp_path / "part", FAST)
        assert dest.read_bytes() == data
    assert not list((tmp_path / "part").glob("*"))


def test_a_file_url_naming_another_host_is_refused(archive, tmp_path):
    """file://otherhost/path is refused, naming the host: file:// reads this machine's
    files only. file://localhost/path is read as this machine's."""
    url = "file://otherhost" + str(archive["path"])
    with pytest.raises(DownloadError, match=r"names a file on the host 'otherhost', but file:// "
                                            r"reads this machine's files only"):
        fetch(url, None, tmp_path / "raw" / "a.tar.gz", tmp_path / "part", FAST)
    fetch("file://localhost" + str(archive["path"]), archive["md5"], tmp_path / "raw" / "b.tar.gz",
          tmp_path / "part", FAST)


@pytest.mark.parametrize("md5_pinned", [False, True])
def test_a_url_naming_the_stages_own_output_keeps_the_only_copy(archive, tmp_path, md5_pinned):
    """data.url naming the download stage's own output (by path, file:// URL or a path
    through ..), with data.md5 null or another archive's, is refused before anything is
    deleted: refetching it would delete the only copy. With its own md5 it is already
    there."""
    dest = tmp_path / "raw" / "cifar-10-binary.tar.gz"
    fetch(str(archive["path"]), archive["md5"], dest, tmp_path / "part", FAST)
    data = dest.read_bytes()
    md5_given = "0" * 32 if md5_pinned else None  # pinned to another version: refetch too
    for url in (str(dest), dest.as_uri(), str(tmp_path / "raw" / ".." / "raw" / dest.name)):
        with pytest.raises(DownloadError, match=r"is the download stage's own output .*would "
                                                r"delete the only copy.*Nothing was changed"):
            fetch(url, md5_given, dest, tmp_path / "part", FAST)
        assert dest.read_bytes() == data
    # pinned to its own md5, it is simply already there
    assert fetch(str(dest), archive["md5"], dest, tmp_path / "part", FAST)["md5"] == archive["md5"]


@pytest.mark.parametrize("md5_given", [True, False])
def test_a_folder_where_the_archive_belongs_is_one_line(archive, tmp_path, md5_given):
    """A folder where the archive belongs is one line naming it, left as it is, not an
    IsADirectoryError traceback."""
    dest = tmp_path / "raw" / "cifar-10-binary.tar.gz"
    (dest / "inside").mkdir(parents=True)
    with pytest.raises(DownloadError, match=r"cifar-10-binary.tar.gz: a folder where the download "
                                            r"stage keeps its file .*Nothing was changed"):
        fetch(str(archive["path"]), archive["md5"] if md5_given else None, dest,
              tmp_path / "part", FAST)
    assert (dest / "inside").is_dir()


def test_a_fifo_where_the_archive_belongs_is_refused_instead_of_hanging(archive, tmp_path):
    """A FIFO where the archive belongs (`mkfifo data/raw/cifar-10-binary.tar.gz`) is
    refused as not a regular file, never opened (hashing it would wait forever)."""
    import os

    dest = tmp_path / "raw" / "cifar-10-binary.tar.gz"
    dest.parent.mkdir()
    os.mkfifo(dest)
    with pytest.raises(DownloadError, match=r"not a regular file where the download stage keeps"):
        fetch(str(archive["path"]), archive["md5"], dest, tmp_path / "part", FAST)


def test_a_failed_download_leaves_no_empty_partial_folder(tmp_path):
    """A failed download leaves no empty --partial folder behind."""
    from types import SimpleNamespace

    from cifar10_tutorial.data.download import fetch_dataset

    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not an archive")
    data = SimpleNamespace(dataset="cifar10", url=str(bad), md5=None, svhn_extra=False,
                           label="fine")
    with pytest.raises(DownloadError):
        fetch_dataset(data, tmp_path / "raw", tmp_path / "partial", FAST)
    assert not (tmp_path / "partial").exists()


def test_md5_mismatch_names_both_and_leaves_nothing(archive, tmp_path):
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError) as exc:
        fetch(str(archive["path"]), "0" * 32, dest, part, FAST)
    msg = str(exc.value)
    assert "md5 mismatch" in msg and "0" * 32 in msg and archive["md5"] in msg
    assert_nothing_left(dest, part)


def test_null_md5_skips_the_check_and_warns(archive, tmp_path, caplog):
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch(str(archive["path"]), None, dest, tmp_path / "part", FAST)
    assert dest.exists()
    assert "NOT checked" in caplog.text and archive["md5"] in caplog.text


def test_html_page_is_not_a_gzip_tar(tmp_path):
    page = tmp_path / "error.html"
    page.write_bytes(b"<!DOCTYPE html><html><body>404 Not Found</body></html>")
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError, match=r"not a gzip-compressed tar archive.*HTML page"):
        fetch(str(page), None, dest, part, FAST)
    assert_nothing_left(dest, part)


def test_gzip_that_is_not_a_tar(tmp_path):
    import gzip
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_bytes(gzip.compress(b"hello, not a tar" * 100))
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError, match="not a complete gzip tar archive.*truncated or damaged"):
        fetch(str(bogus), None, dest, part, FAST)
    assert_nothing_left(dest, part)


def test_missing_local_file_and_bad_scheme(tmp_path):
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError, match=r"does not exist.*data.url"):
        fetch(str(tmp_path / "missing.tar.gz"), None, dest, part, FAST)
    with pytest.raises(DownloadError, match="unsupported scheme 'ftp'"):
        fetch("ftp://example.org/a.tar.gz", None, dest, part, FAST)
    assert not dest.exists()


def test_existing_verified_file_is_kept(archive, tmp_path):
    dest = tmp_path / "a.tar.gz"
    dest.write_bytes(archive["path"].read_bytes())
    fetch("http://127.0.0.1:9/never-asked", archive["md5"], dest, tmp_path / "part", FAST)
    assert md5(dest.read_bytes()) == archive["md5"]


# ----------------------------------------------------------------------------- HTTP


class Server:
    """A 127.0.0.1 HTTP server serving one byte string, with switchable misbehaviour."""

    def __init__(self, data: bytes):
        self.data = data
        self.ranges = True  # honour Range requests
        self.drop_after = None  # first full-body response is cut after this many bytes
        self.fail_first = 0  # answer this many requests with 503
        self.status = None  # answer every request with this status
        self.requests = []  # the Range header of each request (None without one)
        self.no_length = False  # send no Content-Length (the body ends when the connection does)
        self.length = None  # send this Content-Length text instead of the body's
        self.always_206 = False  # answer 206 even to a request without Range
        self.content_range = None  # send this Content-Range text on a 206
        self.endless = None  # send this many bytes of zeros after the body, no length
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(self.headers.get("Range"))
                with server.lock:  # this request's settings, fixed as it arrives: a test may
                    # change them while an earlier handler still writes to a closed client
                    cfg = types.SimpleNamespace(**{k: v for k, v in vars(server).items()
                                                   if k not in ("lock", "requests")})
                    failing = not server.status and server.fail_first > 0
                    server.fail_first -= failing
                if cfg.status:
                    self.send_error(cfg.status)
                    return
                if failing:
                    self.send_error(503)
                    return
                start = 0
                rng = self.headers.get("Range")
                if (rng and cfg.ranges) or cfg.always_206:
                    start = int(rng.split("=")[1].split("-")[0]) if rng else 0
                    self.send_response(206)
                    self.send_header("Content-Range", cfg.content_range or
                                     f"bytes {start}-{len(cfg.data) - 1}/{len(cfg.data)}")
                else:
                    self.send_response(200)
                    self.send_header("Accept-Ranges", "bytes" if cfg.ranges else "none")
                body = cfg.data[start:]
                if cfg.endless is not None:
                    self.end_headers()
                    self.wfile.write(body)
                    for _ in range(cfg.endless // 65536):
                        self.wfile.write(b"\0" * 65536)
                    self.close_connection = True
                    return
                if not cfg.no_length:
                    self.send_header("Content-Length", cfg.length or str(len(body)))
                self.end_headers()
                if cfg.drop_after is not None:
                    server.drop_after = None  # only the first full answer is cut
                    self.wfile.write(body[:cfg.drop_after])
                    self.wfile.flush()
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:  # the client has gone already
                        pass
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/cifar-10-binary.tar.gz"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(archive):
    srv = Server(archive["path"].read_bytes())
    yield srv
    srv.close()


def test_malformed_headers_are_one_line(server, archive, tmp_path):
    """Content-Length 'abc', a 206 to a plain request, a Content-Range of garbage on a
    resumed request: each is one line saying what the server sent and what was expected."""
    dest = tmp_path / "raw" / "a.tar.gz"
    server.length = "abc"
    with pytest.raises(DownloadError, match=r"Content-Length 'abc' is not a number of bytes"):
        fetch(server.url, None, dest, tmp_path / "part", FAST)
    server.length, server.always_206 = None, True
    with pytest.raises(DownloadError, match=r"answered 206 \(a part of the file\) to a request "
                                            r"for the whole file"):
        fetch(server.url, None, dest, tmp_path / "part2", FAST)
    server.always_206, server.drop_after = False, len(server.data) // 2
    server.content_range = "garbage"
    with pytest.raises(DownloadError, match=r"Content-Range 'garbage' is not 'bytes START-END/SIZE'"):
        fetch(server.url, None, dest, tmp_path / "part3", FAST)
    assert not dest.exists()


def test_an_endless_body_is_capped(server, tmp_path):
    """A body with no length and no end stops at DownloadOptions.max_bytes, and nothing
    of it is kept."""
    server.endless = 3 << 20
    part = tmp_path / "part"
    opts = DownloadOptions(timeout=5, retries=1, backoff=0.01, progress=False, max_bytes=1 << 20)
    with pytest.raises(DownloadError, match=r"the body goes on past 1,048,576 bytes"):
        fetch(server.url, None, tmp_path / "raw" / "a.tar.gz", part, opts)
    assert not list(part.glob("*.part"))  # nothing of it kept


def test_http_download(server, archive, tmp_path):
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch(server.url, archive["md5"], dest, tmp_path / "part", FAST)
    assert md5(dest.read_bytes()) == archive["md5"]
    assert server.requests == [None]


def test_http_resumes_with_range_after_dropped_connection(server, archive, tmp_path):
    cut = len(server.data) // 3
    server.drop_after = cut
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch(server.url, archive["md5"], dest, tmp_path / "part", FAST)
    assert md5(dest.read_bytes()) == archive["md5"]
    assert server.requests == [None, f"bytes={cut}-"]


def test_http_restarts_when_server_ignores_ranges(server, archive, tmp_path):
    server.ranges = False
    server.drop_after = len(server.data) // 2
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch(server.url, archive["md5"], dest, tmp_path / "part", FAST)
    assert md5(dest.read_bytes()) == archive["md5"]
    assert len(server.requests) == 2  # the second asked for a range and got the whole file


def test_http_resumes_a_partial_file_left_by_an_earlier_run(server, archive, tmp_path):
    part = tmp_path / "part"
    part.mkdir()
    (part / "a.tar.gz.part").write_bytes(server.data[:1000])
    (part / "a.tar.gz.part.json").write_text(
        json.dumps({"url": server.url, "size": len(server.data)}))
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch(server.url, archive["md5"], dest, part, FAST)
    assert md5(dest.read_bytes()) == archive["md5"]
    assert server.requests == ["bytes=1000-"]


def test_http_retries_transient_errors(server, archive, tmp_path):
    server.fail_first = 2
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch(server.url, archive["md5"], dest, tmp_path / "part", FAST)
    assert dest.exists() and len(server.requests) == 3


def test_http_404_fails_at_once(server, tmp_path):
    server.status = 404
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError, match=r"HTTP 404.*data.url"):
        fetch(server.url, None, dest, part, FAST)
    assert len(server.requests) == 1
    assert_nothing_left(dest, part)


def test_http_gives_up_after_retries(server, tmp_path):
    server.fail_first = 10
    dest = tmp_path / "raw" / "a.tar.gz"
    with pytest.raises(DownloadError, match=r"after 3 attempts.*HTTP 503"):
        fetch(server.url, None, dest, tmp_path / "part", FAST)
    assert len(server.requests) == 3 and not dest.exists()


def test_unreachable_url_says_which_and_suggests_a_mirror(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    url = f"http://127.0.0.1:{port}/cifar-10-binary.tar.gz"
    dest = tmp_path / "raw" / "a.tar.gz"
    with pytest.raises(DownloadError) as exc:
        fetch(url, None, dest, tmp_path / "part", FAST)
    msg = str(exc.value)
    assert url in msg and "unreachable" in msg and "mirror" in msg and "data.url" in msg
    assert not dest.exists()


def test_http_md5_mismatch_removes_the_partial_file(server, tmp_path):
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError, match="md5 mismatch"):
        fetch(server.url, "f" * 32, dest, part, FAST)
    assert_nothing_left(dest, part)


# ----------------------------------------------------------------------------- data identity


def _tar_gz(path, members: dict) -> None:
    import io
    import tarfile
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_a_truncated_archive_is_refused_even_without_an_md5(archive, tmp_path):
    """The check reads the whole archive, not its first member: a cut one is refused with
    data.md5: null too, and nothing is left behind."""
    cut = tmp_path / "cut.tar.gz"
    data = archive["path"].read_bytes()
    cut.write_bytes(data[: len(data) * 3 // 4])
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError) as exc:
        fetch(str(cut), None, dest, part, FAST)
    assert "not a complete gzip tar archive" in str(exc.value) and "truncated" in str(exc.value)
    assert_nothing_left(dest, part)
    # with an md5 pinned: the format error, never an offer of the damaged file's md5
    with pytest.raises(DownloadError) as exc:
        fetch(str(cut), archive["md5"], dest, part, FAST)
    assert "truncated" in str(exc.value) and md5(cut.read_bytes()) not in str(exc.value)
    assert "set data.md5" not in str(exc.value)


def test_every_record_file_is_checked(tmp_path):
    from functools import partial

    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.download import check_gzip_tar

    rec = CIFAR10.record_bytes
    good = {f"{CIFAR10.folder}/{n}": bytes(rec * 2) for fs in CIFAR10.splits.values() for n in fs}
    check = partial(check_gzip_tar, spec=CIFAR10)
    short = tmp_path / "short.tar.gz"
    _tar_gz(short, {**good, f"{CIFAR10.folder}/data_batch_3.bin": bytes(rec * 2 - 7)})
    with pytest.raises(DownloadError, match=r"data_batch_3.bin holds 6139 bytes, not a whole number"):
        fetch(str(short), None, tmp_path / "raw" / "a.tar.gz", tmp_path / "part", FAST, check)
    missing = tmp_path / "missing.tar.gz"
    _tar_gz(missing, {k: v for k, v in good.items() if not k.endswith("test_batch.bin")})
    with pytest.raises(DownloadError, match=r"no cifar-10-batches-bin/test_batch.bin \(test split\)"):
        fetch(str(missing), None, tmp_path / "raw" / "a.tar.gz", tmp_path / "part", FAST, check)
    # a file of more records than any of the set (a gzip bomb of zeros)
    import dataclasses

    small = dataclasses.replace(CIFAR10, max_records_per_file=2)
    bomb = tmp_path / "bomb.tar.gz"
    _tar_gz(bomb, {**good, f"{CIFAR10.folder}/data_batch_1.bin": bytes(rec * 3)})
    with pytest.raises(DownloadError, match=r"data_batch_1.bin holds 3 records, more than any "
                                            r"file of cifar10 \(2 at most\)"):
        fetch(str(bomb), None, tmp_path / "raw" / "a.tar.gz", tmp_path / "part", FAST,
              partial(check_gzip_tar, spec=small))
    from cifar10_tutorial.data.prepared import PrepareError
    from cifar10_tutorial.data.preprocess import prepare

    with pytest.raises(PrepareError, match=r"data_batch_1.bin holds 9,219 bytes, more than any "
                                           r"file of this data set \(6,146\)"):
        prepare(bomb, tmp_path / "bomb-prep", small)
    # members named ./cifar-10-batches-bin/... (tar -C d -czf x .) are the same files:
    # the check and preprocess both find them
    dotted = tmp_path / "dotted.tar.gz"
    names = "".join(f"class{i}\n" for i in range(10)).encode()
    _tar_gz(dotted, {**{f"./{k}": v for k, v in good.items()},
                     f"./{CIFAR10.folder}/batches.meta.txt": names})
    fetch(str(dotted), None, tmp_path / "raw" / "d.tar.gz", tmp_path / "part", FAST, check)
    assert prepare(tmp_path / "raw" / "d.tar.gz", tmp_path / "prep", CIFAR10)["counts"] == \
        {"train": 10, "test": 2}


def test_null_md5_prints_the_md5_and_how_to_pin_it(archive, tmp_path, caplog):
    fetch(str(archive["path"]), None, tmp_path / "raw" / "a.tar.gz", tmp_path / "part", FAST)
    assert f"set data.md5: {archive['md5']} in params.yaml" in caplog.text
    assert f"dvc exp run -S data.md5={archive['md5']}" in caplog.text


def test_fetch_dataset_records_what_it_fetched_and_removes_other_files(archive, tmp_path):
    from cifar10_tutorial.data.download import fetch_dataset
    from cifar10_tutorial.params import DataParams

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "cifar-100-binary.tar.gz").write_bytes(b"left by another data set")
    fetch_dataset(DataParams(url=archive["path"].as_uri(), md5=None), raw, tmp_path / "part", FAST)
    assert sorted(p.name for p in raw.iterdir()) == ["cifar-10-binary.tar.gz", "source.json"]
    record = json.loads((raw / "source.json").read_text())
    assert record["dataset"] == "cifar10" and record["md5_pinned"] is False
    assert record["files"] == [{"name": "cifar-10-binary.tar.gz", "url": archive["path"].as_uri(),
                                "size": archive["path"].stat().st_size, "md5": archive["md5"]}]


def test_http_close_without_content_length_is_caught(server, archive, tmp_path):
    """A server that ends early and sends no Content-Length: the cut file fails the check."""
    server.no_length = True
    server.drop_after = len(server.data) // 2
    dest, part = tmp_path / "raw" / "a.tar.gz", tmp_path / "part"
    with pytest.raises(DownloadError, match="not a complete gzip tar archive"):
        fetch(server.url, None, dest, part, FAST)
    assert_nothing_left(dest, part)


def test_a_partial_file_of_another_url_is_not_resumed(server, archive, tmp_path):
    part = tmp_path / "part"
    part.mkdir()
    (part / "a.tar.gz.part").write_bytes(b"x" * 1000)
    (part / "a.tar.gz.part.json").write_text(json.dumps({"url": "http://elsewhere/a.tar.gz",
                                                         "size": 5000}))
    fetch(server.url, archive["md5"], tmp_path / "raw" / "a.tar.gz", part, FAST)
    assert server.requests == [None]  # fetched from the start, no range request


def test_a_partial_file_of_a_changed_source_restarts(server, archive, tmp_path):
    part = tmp_path / "part"
    part.mkdir()
    (part / "a.tar.gz.part").write_bytes(server.data[:1000])
    (part / "a.tar.gz.part.json").write_text(json.dumps({"url": server.url,
                                                         "size": len(server.data) + 10}))
    fetch(server.url, archive["md5"], tmp_path / "raw" / "a.tar.gz", part, FAST)
    assert md5((tmp_path / "raw" / "a.tar.gz").read_bytes()) == archive["md5"]
    assert server.requests == ["bytes=1000-", None]


# ----------------------------------------------------------------------------- DVC filesystems


def test_a_dvc_filesystem_url_through_fsspec(archive, tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/bucket/cifar-10-binary.tar.gz", archive["path"].read_bytes())
    dest = tmp_path / "raw" / "a.tar.gz"
    fetch("memory://bucket/cifar-10-binary.tar.gz", archive["md5"], dest, tmp_path / "part", FAST)
    assert md5(dest.read_bytes()) == archive["md5"]
    with pytest.raises(DownloadError, match="memory://bucket/nothing.tar.gz does not exist"):
        fetch("memory://bucket/nothing.tar.gz", None, tmp_path / "raw" / "b.tar.gz",
              tmp_path / "part", FAST)
    fs.pipe("/bucket/cut.tar.gz", archive["path"].read_bytes()[:3000])  # same checks as any source
    with pytest.raises(DownloadError, match="truncated"):
        fetch("memory://bucket/cut.tar.gz", None, tmp_path / "raw" / "c.tar.gz", tmp_path / "part", FAST)


def test_a_missing_dvc_extra_names_the_install(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import s3fs  # noqa: F401
        pytest.skip("s3fs is installed here")
    except ImportError:
        pass
    with pytest.raises(DownloadError) as exc:
        fetch("s3://bucket/cifar-10-binary.tar.gz", None, tmp_path / "a.tar.gz", tmp_path / "part", FAST)
    assert "pip install 'dvc[s3]'" in str(exc.value) and "\n" not in str(exc.value)


def test_the_stage_refuses_a_folder_of_files_it_did_not_make(archive, tmp_path):
    """`python stages/download.py --out .` in a clone: the folder holds files the stage
    did not make, so it is refused in one line before any fetch, every file left."""
    import subprocess
    import sys

    from conftest import ROOT

    clone = tmp_path / "clone"
    for name in ("src", "stages", ".git"):
        (clone / name).mkdir(parents=True)
        (clone / name / "kept.txt").write_text(name)
    (clone / "params.yaml").write_text(f"data: {{url: {archive['path'].as_uri()}, md5: null}}\n")
    (clone / "cifar-100-binary.tar.gz").write_bytes(b"a file the stage may have made")
    before = sorted(p.relative_to(clone).as_posix() for p in clone.rglob("*"))
    proc = subprocess.run([sys.executable, str(ROOT / "stages/download.py"), "--out", ".",
                           "--partial", str(tmp_path / "part")], cwd=clone,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: .: holds .git, params.yaml, src, "
                                                    "stages, which the download stage did not "
                                                    "make and would delete"), proc.stderr
    assert "give --out a folder of its own" in lines[0] and "Nothing was changed" in lines[0]
    assert sorted(p.relative_to(clone).as_posix() for p in clone.rglob("*")) == before


def test_another_data_sets_files_go_only_once_the_new_ones_are_in(tmp_path):
    from cifar10_tutorial.data.download import fetch_dataset
    from cifar10_tutorial.params import DataParams

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "cifar-100-binary.tar.gz").write_bytes(b"the previous data set's archive")
    with pytest.raises(DownloadError):
        fetch_dataset(DataParams(url=str(tmp_path / "absent.tar.gz"), md5=None), raw,
                      tmp_path / "part", FAST)
    assert (raw / "cifar-100-binary.tar.gz").exists()


def test_a_partial_folder_that_is_a_file_or_cannot_be_made_is_one_line(archive, tmp_path):
    """--partial naming a file, or a folder that cannot be made (/proc/x), is one line
    naming it, the file left as it was and nothing fetched."""
    from cifar10_tutorial.data.download import fetch_dataset
    from cifar10_tutorial.errors import PipelineError
    from cifar10_tutorial.params import DataParams

    data = DataParams(url=str(archive["path"]), md5=archive["md5"])
    (tmp_path / "pf").write_text("mine")
    with pytest.raises(PipelineError, match=r"pf: a file, where the run needs a folder"):
        fetch_dataset(data, tmp_path / "r9", tmp_path / "pf", FAST)
    assert (tmp_path / "pf").read_text() == "mine" and not (tmp_path / "r9").exists()
    if Path("/proc").is_dir():
        with pytest.raises(PipelineError, match=r"/proc: cannot write there"):
            fetch_dataset(data, tmp_path / "r10", Path("/proc/x"), FAST)


def _tar_gz_of(path, members):
    """A gzip tar of ``members``: (name, bytes) for a file, (name, "-> target") for a
    symbolic link, (name, "=> target") for a hard link."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tf:
        for name, body in members:
            info = tarfile.TarInfo(name)
            if isinstance(body, str):
                info.type = tarfile.SYMTYPE if body.startswith("->") else tarfile.LNKTYPE
                info.linkname = body[3:]
                tf.addfile(info)
            else:
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
    return path


@pytest.mark.parametrize("members, expected", [
    ([("cifar-10-batches-bin/data_batch_1.bin", "=> /etc/passwd")],
     "member cifar-10-batches-bin/data_batch_1.bin is a hard link"),
    ([("cifar-10-batches-bin/data_batch_3.bin", "-> /etc/shadow")],
     "member cifar-10-batches-bin/data_batch_3.bin is a symbolic link"),
    ([("cifar-10-batches-bin/data_batch_1.bin", b"\0" * 3073),
      ("cifar-10-batches-bin/data_batch_1.bin", b"\1" * 3073)],
     "member cifar-10-batches-bin/data_batch_1.bin appears twice"),
])
def test_link_and_duplicate_members_are_named(tmp_path, members, expected):
    """A member that is a link, or appears twice (which copy would be read?), is named
    as such: not reported as missing, nor read silently."""
    from cifar10_tutorial.data.datasets import CIFAR10
    from cifar10_tutorial.data.download import check_gzip_tar

    path = _tar_gz_of(tmp_path / "a.tar.gz", members)
    with pytest.raises(DownloadError, match=f"^src: {expected}"):
        check_gzip_tar(path, "src", CIFAR10)
