"""Which files a source path names: folders (flat or recursive), globs, dot names, gs:// alike."""

import pytest

from transforms.files import (
    file_pattern,
    is_input,
    match_files,
    open_file,
    pattern_root,
    relative_path,
)

BUCKET = "shardflow-test"
TREE = [
    "a.png",
    "cat/1.png",
    "cat/2.jpg",
    "dog/puppies/3.png",
    ".DS_Store",
    "cat/.swp",
    ".ipynb_checkpoints/1-checkpoint.png",
    "dog/.cache/4.png",
]
VISIBLE_FLAT = ["a.png"]
VISIBLE_TREE = ["a.png", "cat/1.png", "cat/2.jpg", "dog/puppies/3.png"]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / ".hidden-parent" / "photos"  # a dot folder above the root does not hide
    for name in TREE:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode())
    return str(root)


def test_file_pattern_of_folders_globs_and_files(tree):
    assert file_pattern(tree) == tree + "/*"
    assert file_pattern(tree, recursive=True) == tree + "/**"
    assert file_pattern(tree + "/*/*.png", recursive=True) == tree + "/*/*.png"
    assert file_pattern(tree + "/a.png", recursive=True) == tree + "/a.png"
    assert file_pattern("gs://b/photos/", recursive=True) == "gs://b/photos/**"
    assert file_pattern("gs://b/photos/") == "gs://b/photos/*"
    assert file_pattern("gs://b/photos/a.png", recursive=True) == "gs://b/photos/a.png"


@pytest.mark.parametrize(
    "path, root",
    [
        ("gs://b/photos/", "gs://b/photos"),
        ("gs://b/photos/**", "gs://b/photos"),
        ("gs://b/photos/*/*.jpg", "gs://b/photos"),
        ("gs://b/photos/cat*/x.jpg", "gs://b/photos"),
        ("gs://b/photos/cat/1.jpg", "gs://b/photos/cat"),
        ("/data/photos/**/*.png", "/data/photos"),
        ("/data/photos/p?.png", "/data/photos"),
    ],
)
def test_pattern_root_is_the_folder_before_any_wildcard(path, root):
    assert pattern_root(path) == root


def test_pattern_root_of_a_local_folder_and_file(tree):
    assert pattern_root(tree) == tree
    assert pattern_root(tree + "/cat/1.png") == tree + "/cat"


def test_relative_path_and_dot_names_below_the_root():
    root = "/x/.cache/photos"
    assert relative_path(root + "/cat/1.png", root) == "cat/1.png"
    assert relative_path("/elsewhere/1.png", root) == "1.png"
    assert is_input(root + "/cat/1.png", root)
    assert not is_input(root + "/cat/.1.png", root)
    assert not is_input(root + "/.thumbs/1.png", root)
    assert not is_input("gs://b/photos/cat/", "gs://b/photos")  # a gs:// folder marker
    assert not is_input("/x/.1.png")


def test_match_files_of_a_folder_flat_or_recursive(tree):
    assert match_files(tree) == [f"{tree}/{name}" for name in VISIBLE_FLAT]
    assert match_files(tree, recursive=True) == [f"{tree}/{name}" for name in VISIBLE_TREE]
    assert match_files(tree + "/") == [f"{tree}/{name}" for name in VISIBLE_FLAT]


def test_match_files_of_globs_with_double_star(tree):
    assert match_files(tree + "/**") == [f"{tree}/{name}" for name in VISIBLE_TREE]
    # `**/` needs at least one folder level: a.png, directly in the root, does not match
    assert match_files(tree + "/**/*.png") == [f"{tree}/cat/1.png", f"{tree}/dog/puppies/3.png"]
    assert match_files(tree + "/*/*") == [f"{tree}/cat/1.png", f"{tree}/cat/2.jpg"]


def test_gcs_paths_match_like_local_ones(gcs_emulator):
    bucket = gcs_emulator.client().bucket(BUCKET)
    for name in TREE + ["cat/"]:  # "cat/": a folder-marker object, as consoles create them
        bucket.blob(f"files/photos/{name}").upload_from_string(name.encode())
    bucket.blob("files/photos2/z.png").upload_from_string(b"z")
    root = f"gs://{BUCKET}/files/photos"
    assert match_files(root + "/", recursive=True) == [f"{root}/{n}" for n in VISIBLE_TREE]
    assert match_files(root + "/") == [f"{root}/{n}" for n in VISIBLE_FLAT]
    assert match_files(root + "/**") == [f"{root}/{n}" for n in VISIBLE_TREE]
    assert match_files(root + "/**/*.png") == [f"{root}/cat/1.png", f"{root}/dog/puppies/3.png"]
    with open_file(f"{root}/cat/2.jpg") as f:
        assert f.read() == b"cat/2.jpg"


def test_compressed_inputs_read_as_text_streams(tmp_path):
    import gzip
    import io

    from transforms.files import open_file

    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    with open_file(str(path)) as stream:
        assert list(io.TextIOWrapper(stream, encoding="utf-8")) == ['{"a": 1}\n', '{"a": 2}\n']


def test_a_truncated_gzip_input_raises_naming_the_file(tmp_path):
    import gzip

    from transforms.files import CorruptFile, open_file

    data = gzip.compress(b"".join(b"%d\n" % i for i in range(5000)))
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFile, match="cut.txt.gz: truncated or corrupt compressed file"):
        with open_file(str(path)) as stream:
            stream.read()


def test_a_bare_glob_matches_in_the_working_folder(tmp_path, monkeypatch):
    """`*.csv` (no folder part) matches as `./*.csv` does: Beam's local glob alone finds none."""
    for name in ("a.csv", "b.csv", ".hidden.csv", "c.txt"):
        (tmp_path / name).write_text("x\n")
    monkeypatch.chdir(tmp_path)
    assert match_files("*.csv") == ["./a.csv", "./b.csv"]
    assert match_files("a.csv") == ["a.csv"]


WILD = [
    "*", "**", "*.png", "**.png", "**/*.png", "?.png", "[ab].*", "[!a].png", "cat/", "a.png",
    "nothing", "cat", "*/", "**/puppies/*", "c*/**", "[", "[]]*", "[!]]*", "dog/[p]uppies/*",
]  # fmt: skip


@pytest.mark.parametrize("wild", WILD)
def test_a_local_pattern_matches_what_beam_would_match(tree, wild):
    """Local paths are matched without Beam (`local_matches`: `shardflow predict` and `init`
    load no Beam) by the rule of Beam's file systems: the same files for every pattern, a
    link to a folder listed and not followed, a `[` that opens no set taken as itself."""
    import os

    from apache_beam.io.filesystems import FileSystems

    from transforms.files import local_matches

    def beam(pattern: str) -> list[str]:
        return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)

    os.symlink(f"{tree}/cat", f"{tree}/link")
    path = f"{tree}/{wild}"
    assert sorted(local_matches(path)) == beam(path)
    root = pattern_root(path)
    assert match_files(path) == [p for p in beam(file_pattern(path)) if is_input(p, root)]
