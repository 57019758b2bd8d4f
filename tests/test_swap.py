"""A folder written aside and swapped in whole (files.swap_in_folder): whatever moment an
interruption comes, the folder's name holds the old folder or the new one, and the next
writer restores or removes what was left beside it, never a file it did not write."""
import subprocess
import sys

import pytest

from cifar10_tutorial import files
from cifar10_tutorial.files import recover_swapped_folder, staging_folder, swap_in_folder

OWN = {"model.pt", "published.json"}
MARK = "published.json"  # written last: a complete folder holds it


def folder(path, **contents):
    path.mkdir(parents=True)
    for name, text in contents.items():
        (path / name).write_text(text)
    return path


def snapshot(path):
    return {p.name: p.read_text() for p in path.iterdir()}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("exchange", [True, False])
def test_a_folder_is_replaced_whole_and_nothing_is_left_beside_it(tmp_path, monkeypatch,
                                                                   exchange):
    if not exchange:  # systems without renameat2: two renames
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    dest = folder(tmp_path / "out", **{"model.pt": "old", "published.json": "{}"})
    staged = staging_folder(dest)
    (staged / "model.pt").write_text("new")
    swap_in_folder(staged, dest, OWN)
    assert snapshot(dest) == {"model.pt": "new"}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_old_folder_holding_a_file_of_the_users_is_kept(tmp_path):
    dest = folder(tmp_path / "out", **{"model.pt": "old", "notes.md": "mine"})
    staged = staging_folder(dest)
    (staged / "model.pt").write_text("new")
    swap_in_folder(staged, dest, OWN)
    assert snapshot(dest) == {"model.pt": "new"}
    kept = [p for p in tmp_path.iterdir() if p.name != "out"]
    assert len(kept) == 1 and snapshot(kept[0]) == {"model.pt": "old", "notes.md": "mine"}


@pytest.mark.parametrize("name", ["out", "o" * 250], ids=["out", "a-250-byte-name"])
def test_a_swap_killed_between_its_two_renames_is_restored_by_the_next_writer(tmp_path,
                                                                             monkeypatch, name):
    """The two-step rename (no renameat2) killed after the first: the old folder waits
    beside the name, which the next writer renames back before it does anything else (a
    long name too: its leftovers carry it cut, files.hidden_stem)."""
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    dest = folder(tmp_path / name, **{"model.pt": "old", "published.json": "{}"})
    staged = staging_folder(dest)
    (staged / "model.pt").write_text("new")
    real_rename, calls = files.os.rename, []

    def killed_after_the_first(a, b):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process ends here
        real_rename(a, b)

    monkeypatch.setattr(files.os, "rename", killed_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        swap_in_folder(staged, dest, OWN)
    monkeypatch.setattr(files.os, "rename", real_rename)
    assert not dest.exists()
    # the process that was swapping is gone: its leftovers carry a dead pid, and no
    # process holds them any more (the kernel drops a dead process's locks)
    files.release_folder(staged)
    pid = dead_pid()
    stem = files.hidden_stem(name)
    for left in tmp_path.iterdir():
        kind, rest = left.name[len(f".{stem}."):].split("-", 1)
        left.rename(tmp_path / f".{stem}.{kind}-{pid}-{rest.split('-', 1)[1]}")
    said = recover_swapped_folder(dest, OWN, MARK)
    assert snapshot(dest) == {"model.pt": "old", "published.json": "{}"}
    assert [p.name for p in tmp_path.iterdir()] == [name], said
    assert any("restored" in line for line in said) and any("half built" in line for line in said)


def test_leftovers_of_a_running_writer_or_with_foreign_files_are_not_touched(tmp_path):
    dest = folder(tmp_path / "out", **{"model.pt": "current"})
    running = folder(tmp_path / f".out.staging-{subprocess.os.getppid()}-abc", **{"model.pt": "x"})
    foreign = folder(tmp_path / f".out.staging-{dead_pid()}-abc", **{"thesis.tex": "mine"})
    said = recover_swapped_folder(dest, OWN, MARK)
    assert running.is_dir() and snapshot(foreign) == {"thesis.tex": "mine"}
    assert said == [f"{foreign}: left by an interrupted swap, and holds files it did not "
                    f"write; left as it is: move it away once you have looked at it"]
    assert snapshot(dest) == {"model.pt": "current"}


def test_a_staging_folder_holding_its_writers_temporary_files_is_removed(tmp_path):
    """A writer killed while it built its staging folder leaves its own files and the
    temporary files of the writes it had begun (.NAME.<random>.tmp, a figure's .tmp.png):
    all its own, so the next writer removes the folder; a name of that shape for a file
    the writer does not make is not its own."""
    dest = folder(tmp_path / "out", **{"model.pt": "current"})
    killed = folder(tmp_path / f".out.staging-{dead_pid()}-abc",
                    **{"model.pt": "x", ".published.json.k3j_9xq2.tmp": "",
                       ".model.pt.abcdefgh.tmp.png": ""})
    said = recover_swapped_folder(dest, OWN, MARK)
    assert said == [f"{killed}: removed, a folder an interrupted swap left half built"]
    assert not killed.exists() and snapshot(dest) == {"model.pt": "current"}
    other = folder(tmp_path / f".out.staging-{dead_pid()}-def",
                   **{".thesis.tex.abcdefgh.tmp": "mine"})
    recover_swapped_folder(dest, OWN, MARK)
    assert snapshot(other) == {".thesis.tex.abcdefgh.tmp": "mine"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_on_linux_the_swap_is_one_step(tmp_path):
    a, b = folder(tmp_path / "a", x="a"), folder(tmp_path / "b", x="b")
    assert files._exchange(a, b)
    assert snapshot(a) == {"x": "b"} and snapshot(b) == {"x": "a"}


@pytest.mark.parametrize("kind", ["replaced", "staging"])
def test_a_leftover_that_is_a_link_is_never_followed(tmp_path, kind):
    """A link named like a leftover, to a folder of the user's: nothing in that folder is
    removed or moved, with or without the published folder in place."""
    foreign = folder(tmp_path / "foreign", **{"model.pt": "mine", "published.json": "mine"})
    (tmp_path / f".out.{kind}-{dead_pid()}-x").symlink_to(foreign)
    for dest_there in (True, False):
        dest = tmp_path / "out"
        if dest_there and not dest.exists():
            folder(dest, **{"model.pt": "current"})
        elif not dest_there and dest.exists():
            for p in dest.iterdir():
                p.unlink()
            dest.rmdir()
        said = recover_swapped_folder(dest, OWN, MARK)
        assert snapshot(foreign) == {"model.pt": "mine", "published.json": "mine"}
        assert any("a link or a file" in line for line in said), said
        assert dest.exists() == dest_there and not dest.is_symlink()


def test_a_name_with_glob_characters_matches_only_its_own_leftovers(tmp_path):
    """--out pu[b]: the leftovers of `pub` (which the pattern pu[b] would match) are not
    its own, and stay."""
    theirs = folder(tmp_path / f".pub.replaced-{dead_pid()}-u", **{"model.pt": "only copy"})
    dest = folder(tmp_path / "pu[b]", **{"model.pt": "other"})
    assert recover_swapped_folder(dest, OWN, MARK) == []
    assert snapshot(theirs) == {"model.pt": "only copy"}
    dest.rename(tmp_path / "elsewhere")
    assert recover_swapped_folder(dest, OWN, MARK) == [] and not dest.exists()


def test_a_replaced_folder_holding_foreign_files_is_not_restored(tmp_path):
    left = folder(tmp_path / f".out.replaced-{dead_pid()}-w", **{"model.pt": "old",
                                                                  "thesis.txt": "mine"})
    said = recover_swapped_folder(tmp_path / "out", OWN, MARK)
    assert not (tmp_path / "out").exists() and snapshot(left)["thesis.txt"] == "mine"
    assert "left as it is" in said[0]


def test_an_old_folder_is_removed_only_once_its_replacement_is_in_place(tmp_path):
    """Two folders set aside for one name, or one beside an empty folder of that name: the
    writer cannot tell which is the one to keep, and keeps both, named."""
    a = folder(tmp_path / f".out.replaced-{dead_pid()}-a", **{"model.pt": "a"})
    b = folder(tmp_path / f".out.replaced-{dead_pid()}-b", **{"model.pt": "b"})
    said = recover_swapped_folder(tmp_path / "out", OWN, MARK)
    assert snapshot(a) == {"model.pt": "a"} and snapshot(b) == {"model.pt": "b"}
    assert not (tmp_path / "out").exists() and len(said) == 2
    b.rename(tmp_path / "b-elsewhere")
    (tmp_path / "out").mkdir()  # empty: no replacement of a
    said = recover_swapped_folder(tmp_path / "out", OWN, MARK)
    assert snapshot(a) == {"model.pt": "a"} and "holds no replacement" in said[0]


def test_a_folder_without_the_writers_mark_is_no_replacement_and_odd_names_no_leftovers(
        tmp_path):
    """The old folder set aside stays while the name holds no complete replacement (a
    file of the user's named like one of the writer's is not one); a folder whose name
    lacks the writer's pid is someone's own, never a leftover."""
    kept = folder(tmp_path / f".out.replaced-{dead_pid()}-k", **{"model.pt": "old",
                                                                  "published.json": "{}"})
    folder(tmp_path / "out", **{"model.pt": "the user's"})
    said = recover_swapped_folder(tmp_path / "out", OWN, MARK)
    assert snapshot(kept) == {"model.pt": "old", "published.json": "{}"}
    assert "holds no replacement" in said[0]
    notes = folder(tmp_path / ".out.staging-notes", **{"model.pt": "mine"})
    odd = folder(tmp_path / ".out.replaced-12-", **{"model.pt": "mine"})
    recover_swapped_folder(tmp_path / "out", OWN, MARK)
    assert snapshot(notes) == {"model.pt": "mine"} and snapshot(odd) == {"model.pt": "mine"}
