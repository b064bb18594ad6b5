"""ImageNet (ILSVRC2012) from the files a user already has.

    dawnpipe fetch imagenet --source /data/ilsvrc2012 --dest data/raw/imagenet
    dawnpipe prepare imagenet --raw data/raw/imagenet --out data/prepared/imagenet

ILSVRC2012 is downloaded from image-net.org after registration, so there is
no URL to fetch it from; ``--source`` names a directory (or a URL base of a
private mirror) holding, for each split, either the official archive or a
folder:

- training: ``ILSVRC2012_img_train.tar`` (a tar of one tar per class,
  ``n01440764.tar`` ...) or ``train/`` with one sub-folder (or one tar) per
  class, named by its WordNet id;
- validation: ``ILSVRC2012_img_val.tar`` (50,000 JPEGs in one flat tar) or
  ``val/``, flat, or with one sub-folder per class (as left by the widely used
  ``valprep.sh``);
- for flat validation images, a label file (``data.val_labels``): lines of
  ``<image> <wnid>`` (or ``<image> <index>``, an index into the sorted wnids,
  as in Caffe's ``val.txt``), or Kaggle's ``LOC_val_solution.csv``. The
  devkit's numeric ground truth needs ``meta.mat`` (MATLAB) to map its ids and
  is not read; convert it to one of these first.

fetch checks archives against the MD5s image-net.org publishes (``--expect``
replaces them for other copies) and links them into ``--dest`` (a hard link
where possible, else a symbolic one: 140 GB are not copied); folders are
linked and their listing (every path and size) is hashed into ``fetch.json``,
so prepare can refuse a folder that changed after it was checked.
``dawnpipe.data.shards`` does the decoding.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import tarfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dawnpipe.data.download import download
from dawnpipe.data.files import content_check, expected_text, fetch_files, got_text, has_checksum, is_url, no_checksum_note
from dawnpipe.data.shards import ImageRef, write_image_shards
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json
from dawnpipe.tasks.kind import DataKind

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
SPLITS = ("train", "test")  # "test" is ILSVRC2012 validation: the held-out set the metric is measured on


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


# ---------------------------------------------------------------- fetch


def fetch_imagenet(spec: dict[str, Any], dest: Path, cache: Path, source: str | None) -> dict[str, Any]:
    """FETCHERS entry: the record of what fetch.json vouches for."""
    if source is None:
        raise DawnpipeError(
            "imagenet: ILSVRC2012 cannot be downloaded without registering at image-net.org; give --source DIR "
            f"(holding {spec['train']['archive']} or {spec['train']['folder']}/, {spec['test']['archive']} or "
            f"{spec['test']['folder']}/, and a validation label file: {', '.join(spec['val_labels'])}) or a mirror's URL base"
        )
    dest.mkdir(parents=True, exist_ok=True)
    if is_url(source):
        return _fetch_from_url(spec, dest, cache, source)
    root = Path(source)
    if not root.is_dir():
        raise DawnpipeError(f"--source {source}: not a directory (expected one holding the ILSVRC2012 archives or folders)")
    record: dict[str, Any] = {}
    for split in SPLITS:
        archive, folder = root / spec[split]["archive"], root / spec[split]["folder"]
        if archive.is_file():
            record[archive.name] = {"split": split, "form": "archive", **_link_verified_archive(archive, spec["files"].get(archive.name, {}), dest)}
        elif folder.is_dir():
            record[folder.name] = {"split": split, "form": "folder", **_link_folder(folder, dest)}
        else:
            raise DawnpipeError(f"{root}: neither {archive.name} nor a folder {folder.name}/ for the {split} split")
    test_form = next(r for r in record.values() if r["split"] == "test")
    if test_form["form"] == "archive" or not _has_class_folders(root / spec["test"]["folder"]):
        name, entry = _copy_labels(root, spec, dest)
        record[name] = entry
    return record


def _fetch_from_url(spec, dest: Path, cache: Path, base: str) -> dict[str, Any]:
    base = base if base.endswith("/") else base + "/"
    archives = {spec[s]["archive"]: spec["files"].get(spec[s]["archive"], {}) for s in SPLITS}
    listed_labels = {n: spec["files"][n] for n in spec["val_labels"] if n in spec["files"]}
    record = fetch_files({**archives, **listed_labels}, dest, cache, base, {})
    for s in SPLITS:
        record[spec[s]["archive"]].update(split=s, form="archive")
    if listed_labels:
        name = next(iter(listed_labels))
    else:  # no checksum for a label file (none is published): take the first the mirror has, check its syntax
        name = _download_first_label_file(spec["val_labels"], base, dest, cache)
    parse_val_labels(dest / name)
    record.setdefault(name, {"origin": urllib.parse.urljoin(base, name)})
    record[name].update(split="test", form="labels", sha256=_sha256(dest / name))
    return record


def _download_first_label_file(names: list[str], base: str, dest: Path, cache: Path) -> str:
    problems = []
    for name in names:
        part = cache / f"{name}.part"
        try:
            download(urllib.parse.urljoin(base, name), part)
        except DawnpipeError as e:
            problems.append(str(e))
            continue
        part.replace(dest / name)
        return name
    raise DawnpipeError(f"no validation label file at {base}: " + "; ".join(problems))


def _link_verified_archive(archive: Path, file_spec: dict, dest: Path) -> dict:
    if not has_checksum(file_spec):
        print(f"fetch: note: {no_checksum_note(archive.name)}; its structure is checked by prepare only")
    check = content_check(archive, file_spec)
    if not check.ok:
        raise DawnpipeError(
            f"{archive}: checksum mismatch: {check.reason} ({got_text(check)}; {expected_text(file_spec, archive.name)}); nothing was linked into {dest}"
        )
    how = _link(archive, dest / archive.name)
    print(terminal_safe(f"fetch: {archive.name}: verified ({check.md5 or check.sha256}) and {how} from {archive}"))
    st = archive.stat()
    return {"origin": str(archive.resolve()), "md5": check.md5, "sha256": check.sha256, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _link(target: Path, link: Path) -> str:
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    try:
        os.link(target, link)
        return "hard-linked"
    except OSError:  # another file system, or a folder
        link.symlink_to(target.resolve(), target_is_directory=target.is_dir())
        return "linked"


def _link_folder(folder: Path, dest: Path) -> dict:
    listing = folder_listing(folder)
    if not listing["images"]:
        raise DawnpipeError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}) in it")
    how = _link(folder, dest / folder.name)
    print(terminal_safe(f"fetch: {folder.name}/: {listing['images']} images, {listing['tars']} class tars; {how} from {folder}"))
    return {"origin": str(folder.resolve()), **listing}


def folder_listing(folder: Path) -> dict:
    """Image and class-tar counts and the sha256 of every (path, size) under ``folder``."""
    sha, images, tars, total = hashlib.sha256(), 0, 0, 0
    for rel, size in sorted(_walk(folder)):
        sha.update(f"{rel}\t{size}\n".encode())
        images += _is_image(rel)
        tars += rel.endswith(".tar")
        total += size
    return {"images": images, "tars": tars, "bytes": total, "listing_sha256": sha.hexdigest()}


def _walk(folder: Path, prefix: str = "") -> Iterator[tuple[str, int]]:
    with os.scandir(folder) as it:
        for e in it:
            rel = f"{prefix}{e.name}"
            if e.is_dir():
                yield from _walk(Path(e.path), rel + "/")
            elif _is_image(e.name) or e.name.endswith(".tar"):
                yield rel, e.stat().st_size


def _has_class_folders(folder: Path) -> bool:
    return folder.is_dir() and any(e.is_dir() for e in os.scandir(folder))


def _copy_labels(root: Path, spec: dict, dest: Path) -> tuple[str, dict]:
    for name in spec["val_labels"]:
        path = root / name
        if path.is_file():
            file_spec = spec["files"].get(name, {})
            check = content_check(path, file_spec)
            if not check.ok:
                raise DawnpipeError(f"{path}: checksum mismatch: {check.reason} ({got_text(check)}; {expected_text(file_spec, name)})")
            parse_val_labels(path)
            shutil.copyfile(path, dest / f".{name}.tmp")
            (dest / f".{name}.tmp").replace(dest / name)
            print(terminal_safe(f"fetch: {name}: copied from {path}"))
            return name, {"split": "test", "form": "labels", "origin": str(path.resolve()), "sha256": check.sha256, "bytes": check.size}
    raise DawnpipeError(f"{root}: the validation images are not in class folders and there is no label file ({', '.join(spec['val_labels'])})")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def parse_val_labels(path: Path) -> dict[str, str | int]:
    """{image stem: wnid, or an int index into the sorted wnids}."""
    labels: dict[str, str | int] = {}
    with open(path, encoding="utf-8-sig", newline="") as f:
        if path.suffix.lower() == ".csv":  # Kaggle: ImageId,PredictionString ("wnid x y x y wnid ...")
            reader = csv.DictReader(f)
            if not reader.fieldnames or not {"ImageId", "PredictionString"} <= set(reader.fieldnames):
                raise DawnpipeError(f"{path}: expected the columns ImageId,PredictionString (Kaggle's LOC_val_solution.csv)")
            for row_no, row in enumerate(reader, start=2):
                tokens = (row["PredictionString"] or "").split()
                if not tokens:
                    raise DawnpipeError(f"{path}: row {row_no}: empty PredictionString for {row['ImageId']}")
                labels[_stem(row["ImageId"])] = tokens[0]
            return labels
        for line_no, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = re.split(r"[\s,]+", line)
            if len(parts) != 2:
                raise DawnpipeError(f"{path}: line {line_no}: expected '<image> <wnid or class index>', got {line!r}")
            name, label = parts
            labels[_stem(name)] = int(label) if label.isdigit() else label
    if not labels:
        raise DawnpipeError(f"{path}: no labels in it")
    return labels


def _stem(name: str) -> str:
    base = re.split(r"[/:]", name)[-1]  # "val/x.JPEG", "ILSVRC2012_img_val.tar:x.JPEG"
    return base.rsplit(".", 1)[0] if _is_image(base) else base


# ---------------------------------------------------------------- prepare


def prepare_imagenet(task, raw: Path, out: Path, workers: int | None = None) -> dict:
    """PREPARERS entry: index every image, then decode them in parallel into shards."""
    spec = task.data
    fetched = read_json(raw / "fetch.json")["files"]
    forms = {r["split"]: (name, r) for name, r in fetched.items() if r.get("form") in ("archive", "folder")}
    train_items, classes = _index_train(raw, *forms["train"])
    if spec.get("classes") and len(classes) != spec["classes"]:
        print(f"prepare: note: {len(classes)} classes (ILSVRC2012 has {spec['classes']})")
    labels_file = next((raw / n for n, r in fetched.items() if r.get("form") == "labels"), None)
    test_items = _index_test(raw, *forms["test"], labels_file, classes)
    p = spec["prepare"]
    splits = {}
    for split, items, size, ratio in (("train", train_items, p["train_size"], 1.0), ("test", test_items, p["test_size"], p["test_crop_ratio"])):
        official = spec[split].get("items")
        if official is not None and len(items) != official:
            print(f"prepare: note: {split} has {len(items)} items (the official set has {official})")
        splits[split] = write_image_shards(
            out, split, items, classes, size=size, crop_ratio=ratio, shard_items=p["shard_items"], order_seed=p["order_seed"], workers=workers
        )
        splits[split]["source"] = forms[split][0]
    return {
        "format": "npy-uint8-shards",
        "classes": classes,
        "splits": splits,
        "note": "split 'test' is the ILSVRC2012 validation set (the held-out set of the benchmark)",
    }


def _check_unchanged(raw: Path, name: str, record: dict) -> Path:
    path = raw / name
    if record["form"] == "folder":
        if folder_listing(path)["listing_sha256"] != record["listing_sha256"]:
            raise DawnpipeError(f"{path}: the folder changed since 'dawnpipe fetch' listed it (files added, removed or resized); fetch again")
    else:
        st = path.stat()
        if (st.st_size, st.st_mtime_ns) != (record["bytes"], record.get("mtime_ns", st.st_mtime_ns)):
            raise DawnpipeError(f"{path}: size or modification time changed since 'dawnpipe fetch' verified it; fetch again")
    return path


def _index_train(raw: Path, name: str, record: dict) -> tuple[list[tuple[ImageRef, int]], list[str]]:
    path = _check_unchanged(raw, name, record)
    per_class: dict[str, list[ImageRef]] = {}
    if record["form"] == "archive":
        with tarfile.open(path, "r:") as outer:
            for m in outer:
                if m.isfile() and m.name.endswith(".tar"):
                    per_class[Path(m.name).stem] = _inner_tar_refs(path, outer, m)
    else:
        for e in sorted(os.scandir(path), key=lambda e: e.name):
            if e.is_dir():
                per_class[e.name] = [ImageRef(str(Path(e.path, f)), None, None, f"{name}/{e.name}/{f}") for f in sorted(os.listdir(e.path)) if _is_image(f)]
            elif e.name.endswith(".tar"):
                with tarfile.open(e.path, "r:") as t:
                    per_class[e.name[:-4]] = [
                        ImageRef(e.path, m.offset_data, m.size, f"{name}/{e.name}:{m.name}") for m in t if m.isfile() and _is_image(m.name)
                    ]
    # one canonical order (by image name) whatever the form, so a folder and its tar give the same shards
    per_class = {c: sorted(refs, key=lambda r: _stem(r.name)) for c, refs in per_class.items() if refs}
    if not per_class:
        raise DawnpipeError(f"{path}: no class with images (expected one folder or tar per class)")
    classes = sorted(per_class)
    return [(ref, i) for i, c in enumerate(classes) for ref in per_class[c]], classes


def _inner_tar_refs(path: Path, outer: tarfile.TarFile, member: tarfile.TarInfo) -> list[ImageRef]:
    """Images of a per-class tar inside the training tar, addressed by their
    byte range in the outer file: tar stores members uncompressed and contiguous."""
    with tarfile.open(fileobj=outer.extractfile(member), mode="r:") as inner:
        return [
            ImageRef(str(path), member.offset_data + m.offset_data, m.size, f"{path.name}:{member.name}:{m.name}")
            for m in inner
            if m.isfile() and _is_image(m.name)
        ]


def _index_test(raw: Path, name: str, record: dict, labels_file: Path | None, classes: list[str]) -> list[tuple[ImageRef, int]]:
    path = _check_unchanged(raw, name, record)
    index = {c: i for i, c in enumerate(classes)}
    if record["form"] == "folder" and _has_class_folders(path):
        items = []
        for e in sorted(os.scandir(path), key=lambda e: e.name):
            if e.is_dir():
                if e.name not in index:
                    raise DawnpipeError(f"{path / e.name}: class {e.name} does not occur in the training set")
                items += [(ImageRef(str(Path(e.path, f)), None, None, f"{name}/{e.name}/{f}"), index[e.name]) for f in os.listdir(e.path) if _is_image(f)]
        return sorted(items, key=lambda item: _stem(item[0].name))
    if record["form"] == "archive":
        with tarfile.open(path, "r:") as t:
            refs = [ImageRef(str(path), m.offset_data, m.size, f"{name}:{m.name}") for m in t if m.isfile() and _is_image(m.name)]
    else:
        refs = [ImageRef(str(path / f), None, None, f"{name}/{f}") for f in sorted(os.listdir(path)) if _is_image(f)]
    if labels_file is None:
        raise DawnpipeError(f"{path}: flat validation images but fetch recorded no label file")
    labels = parse_val_labels(labels_file)
    items = []
    for ref in sorted(refs, key=lambda r: _stem(r.name)):
        label = labels.get(_stem(ref.name))
        if label is None:
            raise DawnpipeError(f"{labels_file}: no label for {ref.name}")
        if isinstance(label, int):
            if label >= len(classes):
                raise DawnpipeError(f"{labels_file}: {ref.name}: class index {label} outside 0..{len(classes) - 1}")
            items.append((ref, label))
        elif label in index:
            items.append((ref, index[label]))
        else:
            raise DawnpipeError(f"{labels_file}: {ref.name}: class {label} does not occur in the training set")
    if not items:
        raise DawnpipeError(f"{path}: no validation images")
    if len(labels) > len(items):
        print(f"prepare: note: {labels_file.name} labels {len(labels) - len(items)} images that are not in {name}")
    return items


# No public URL (a --source the user gives); images decoded in parallel into shards.
KIND = DataKind("imagenet", items="image", fetch=fetch_imagenet, prepare=prepare_imagenet, parallel_prepare=True)
