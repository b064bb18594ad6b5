"""ImageNet: ILSVRC2012 layouts (folders, the official archives, a mirror
served on 127.0.0.1) of generated JPEGs with seven classes (more than five, so
top-5 accuracy can miss) and a validation label file, through fetch, prepare (parallel-decoded shards), the streaming
trainer path and the whole pipeline through Snakemake."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import copy_project, resolved_config, run_cli, run_snakemake
from vision_data import WNIDS, imagenet_files, md5_of, serve, write_imagenet_archives, write_imagenet_folders

ARCHIVES = ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar")
OFFICIAL_TRAIN_MD5 = "1d675b47d978889d74fa0da5fadfb00e"


@pytest.fixture(scope="module")
def generated():
    return imagenet_files(per_class=6, n_val=14)


@pytest.fixture(scope="module")
def sources(tmp_path_factory, generated):
    root = tmp_path_factory.mktemp("ilsvrc")
    folders = write_imagenet_folders(root / "folders", *generated)
    archives = write_imagenet_archives(root / "archives", *generated)
    expect = root / "expect.yaml"
    files = {n: {"md5": md5_of(archives / n), "raw": True} for n in ARCHIVES}
    files["val_labels.txt"] = {"sha256": hashlib.sha256((archives / "val_labels.txt").read_bytes()).hexdigest()}
    expect.write_text(yaml.safe_dump({"files": files}))
    with serve(archives) as url:
        yield {"folders": folders, "archives": archives, "expect": expect, "url": url}


def _fetch_prepare(tmp_path, name, *source_args) -> Path:
    raw, out = tmp_path / f"raw-{name}", tmp_path / f"prepared-{name}"
    run_cli("fetch", "imagenet", "--dest", str(raw), *source_args, check=True)
    run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(out), check=True)
    return out


def test_folders_archives_and_a_mirror_give_the_same_shards(sources, generated, tmp_path):
    prepared = {
        "folders": _fetch_prepare(tmp_path, "folders", "--source", str(sources["folders"])),
        "archives": _fetch_prepare(tmp_path, "archives", "--source", str(sources["archives"]), "--expect", str(sources["expect"])),
        "mirror": _fetch_prepare(tmp_path, "mirror", "--source", sources["url"], "--expect", str(sources["expect"])),
    }
    from dawnpipe.data.loader import ShardedArray, load_split

    _, _, val_labels = generated
    for split, n in (("train", 6 * len(WNIDS)), ("test", 14)):
        loaded = {k: load_split(p, split) for k, p in prepared.items()}
        for k, s in loaded.items():
            assert isinstance(s.images, ShardedArray) and s.images.shape == (n, 160, 160, 3), k
            assert s.classes == WNIDS
        ref = np.array(loaded["folders"].images)
        for k in ("archives", "mirror"):
            np.testing.assert_array_equal(np.array(loaded[k].images), ref)
            np.testing.assert_array_equal(loaded[k].labels, loaded["folders"].labels)
    # labels follow the label file (test) and the class folders (train), whatever the item order
    manifest = json.loads((prepared["archives"] / "manifest.json").read_text())
    test_labels = np.load(prepared["archives"] / "test_labels.npy")
    for line in (prepared["archives"] / "test_items.tsv").read_text().splitlines()[1:]:
        item, label, wnid, source = line.split("\t")
        assert WNIDS[test_labels[int(item)]] == wnid == val_labels[source.split(":")[-1]]
    for line in (prepared["archives"] / "train_items.tsv").read_text().splitlines()[1:]:
        _, _, wnid, source = line.split("\t")
        assert source.split(":")[-1].startswith(wnid)
    shard = manifest["splits"]["train"]["images"]["shards"][0]
    arr = np.load(prepared["archives"] / shard["file"], mmap_mode="r")  # memory-mappable
    assert isinstance(arr, np.memmap) and hashlib.sha256(np.ascontiguousarray(arr).data).hexdigest() == shard["sha256"]
    assert sum(manifest["splits"]["test"]["class_counts"].values()) == 14


def test_archive_checksum_mismatch_is_refused_locally_and_from_a_mirror(sources, tmp_path):
    for name, source in (("local", str(sources["archives"])), ("mirror", sources["url"])):
        raw = tmp_path / name
        proc = run_cli("fetch", "imagenet", "--dest", str(raw), "--source", source)  # against the published MD5s
        assert proc.returncode == 1, proc.stderr
        got = md5_of(sources["archives"] / ARCHIVES[0])
        assert ARCHIVES[0] in proc.stderr and OFFICIAL_TRAIN_MD5 in proc.stderr and got in proc.stderr
        assert "Traceback" not in proc.stderr and "None" not in proc.stderr  # md5 only: no "expected sha256 None"
        assert not (raw / "fetch.json").exists()
        assert run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(tmp_path / "p")).returncode == 1


def test_fetch_without_a_source_says_where_imagenet_comes_from(tmp_path):
    proc = run_cli("fetch", "imagenet", "--dest", str(tmp_path / "raw"))
    assert proc.returncode == 1 and "--source" in proc.stderr and "image-net.org" in proc.stderr


def test_a_folder_changed_after_fetch_is_refused(sources, generated, tmp_path):
    import shutil

    folder = shutil.copytree(sources["folders"], tmp_path / "copy")
    raw = tmp_path / "raw"
    run_cli("fetch", "imagenet", "--dest", str(raw), "--source", str(folder), check=True)
    (folder / "train" / WNIDS[0] / "extra.JPEG").write_bytes(generated[0][WNIDS[0]][f"{WNIDS[0]}_5.JPEG"])
    proc = run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(tmp_path / "p"))
    assert proc.returncode == 1 and "changed since" in proc.stderr and "train" in proc.stderr


def test_validation_images_without_a_label_are_named(sources, tmp_path):
    import shutil

    folder = shutil.copytree(sources["folders"], tmp_path / "copy")
    lines = (folder / "val_labels.txt").read_text().splitlines()
    (folder / "val_labels.txt").write_text("\n".join(lines[1:]) + "\n")
    raw = tmp_path / "raw"
    run_cli("fetch", "imagenet", "--dest", str(raw), "--source", str(folder), check=True)
    proc = run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(tmp_path / "p"))
    assert proc.returncode == 1 and "no label for" in proc.stderr and lines[0].split()[0] in proc.stderr


def test_label_file_formats(tmp_path):
    from dawnpipe.data.imagenet import parse_val_labels
    from dawnpipe.errors import DawnpipeError

    txt = tmp_path / "val_labels.txt"
    txt.write_text("# image wnid\nILSVRC2012_val_00000001.JPEG n01751748\nILSVRC2012_val_00000002,n09193705\n")
    assert parse_val_labels(txt) == {"ILSVRC2012_val_00000001": "n01751748", "ILSVRC2012_val_00000002": "n09193705"}
    caffe = tmp_path / "val.txt"
    caffe.write_text("ILSVRC2012_val_00000001.JPEG 65\n")
    assert parse_val_labels(caffe) == {"ILSVRC2012_val_00000001": 65}
    kaggle = tmp_path / "LOC_val_solution.csv"
    kaggle.write_text("\ufeffImageId,PredictionString\nILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 322 295\n")
    assert parse_val_labels(kaggle) == {"ILSVRC2012_val_00008726": "n02119789"}
    bad = tmp_path / "bad.txt"
    bad.write_text("ILSVRC2012_val_00000001.JPEG\n")
    with pytest.raises(DawnpipeError, match="line 1"):
        parse_val_labels(bad)


def test_parallel_decoding_gives_the_sequential_result(sources, tmp_path, capsys):
    """Shards of 5 items decoded by a pool of 2 processes (prepare --workers 2) =
    the same shards decoded in this process (--workers 1) = one shard."""
    from dawnpipe.data.imagenet import _index_train, folder_listing
    from dawnpipe.data.shards import write_image_shards

    record = {"form": "folder", **folder_listing(sources["folders"] / "train")}
    items, classes = _index_train(sources["folders"], "train", record)
    many = write_image_shards(tmp_path / "many", "train", items, classes, size=48, crop_ratio=0.875, shard_items=5, order_seed=3, workers=2)
    assert "into 9 shards of 48x48 with 2 processes" in capsys.readouterr().out
    alone = write_image_shards(tmp_path / "alone", "train", items, classes, size=48, crop_ratio=0.875, shard_items=5, order_seed=3, workers=1)
    assert "into 9 shards of 48x48 with 1 processes" in capsys.readouterr().out
    assert alone["images"]["shards"] == many["images"]["shards"]
    one = write_image_shards(tmp_path / "one", "train", items, classes, size=48, crop_ratio=0.875, shard_items=1000, order_seed=3)
    assert len(many["images"]["shards"]) == 9 and len(one["images"]["shards"]) == 1  # 42 items
    joined = np.concatenate([np.load(tmp_path / "many" / s["file"]) for s in many["images"]["shards"]])
    np.testing.assert_array_equal(joined, np.load(tmp_path / "one" / "train_00000.npy"))
    np.testing.assert_allclose(many["mean"], one["mean"], rtol=1e-9)
    np.testing.assert_allclose(many["std"], one["std"], rtol=1e-9)


def test_sharded_array_indexes_like_one_array():
    from dawnpipe.data.loader import ShardedArray

    whole = np.random.default_rng(0).integers(0, 255, (23, 4, 4, 3), dtype=np.uint8)
    sharded = ShardedArray([whole[:10], whole[10:20], whole[20:]])
    for n in (0, 1, 10, 11, 23, 99):
        np.testing.assert_array_equal(np.array(sharded.prefix(n)), whole[:n])
    index = np.array([22, 3, 10, 9, 3, 15])
    np.testing.assert_array_equal(sharded.take(index), whole[index])
    np.testing.assert_array_equal(sharded[2:19:4], whole[2:19:4])
    np.testing.assert_array_equal(sharded[-1], whole[-1])


def test_streamed_batches_equal_in_memory_batches():
    from dawnpipe.data.loader import ShardedArray, Split
    from dawnpipe.train.data_source import DeviceImages, device_images, epoch_batches

    whole = np.random.default_rng(1).integers(0, 255, (50, 6, 6, 3), dtype=np.uint8)
    labels = torch.arange(50)
    in_memory = device_images(Split(whole, labels.numpy(), ["a"]), torch.device("cpu"))
    streamed = device_images(Split(ShardedArray([whole[:16], whole[16:32], whole[32:]]), labels.numpy(), ["a"]), torch.device("cpu"))
    assert isinstance(streamed, DeviceImages) and streamed.shape == in_memory.shape == (50, 3, 6, 6)
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    pairs = list(zip(epoch_batches(in_memory, labels, perm, 8, 7), epoch_batches(streamed, labels, perm, 8, 7)))
    assert len(pairs) == 7
    for (xa, ya), (xb, yb) in pairs:
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert torch.equal(streamed[5:9], in_memory[5:9])  # what evaluation slices


def random_resized_crop(x: torch.Tensor, size: int, min_scale: float, gen: torch.Generator) -> torch.Tensor:
    """A random resized crop of each item, as the trainer draws and applies it (dawnpipe.train.torch_trainer)."""
    from dawnpipe.train.data_source import draw_resized_crop, resized_crop

    return resized_crop(x, size, draw_resized_crop(x.shape[0], min_scale, gen))


def test_random_resized_crop_of_the_whole_image_is_the_image():
    x = torch.rand(4, 3, 12, 12)
    gen = torch.Generator().manual_seed(0)
    torch.testing.assert_close(random_resized_crop(x, 12, 1.0, gen), x, atol=1e-5, rtol=0)  # area 1 -> no crop
    crops = random_resized_crop(x, 8, 0.1, gen)
    assert crops.shape == (4, 3, 8, 8) and not torch.allclose(crops, torch.nn.functional.interpolate(x, 8))


def test_resnet50_has_the_published_size():
    from dawnpipe.models.torch_zoo import build_model

    model = build_model("resnet50", in_channels=3, num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision's resnet50
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 1000)
    assert type(build_model("resnet56", in_channels=3, num_classes=10)).__name__ == "CifarResNet"


def eager_predictor(ckpt: dict, device, topk: int = 1):
    """The eager answer function of a loaded checkpoint, without the inference
    stage's check: uint8 item (H x W or H x W x C) -> class id, or the ``topk`` best ids."""
    from dawnpipe.infer.torch_model import as_predict_fn, inference_net

    module, _ = inference_net(ckpt)
    return as_predict_fn(module.to(device), device, topk)


def test_top5_inference_answers_five_classes():
    from dawnpipe.models.torch_zoo import build_model

    model = build_model("resnet18", in_channels=3, num_classes=7, width=4)
    ckpt = {
        "model": "resnet18",
        "in_channels": 3,
        "num_classes": 7,
        "model_args": {"width": 4},
        "state_dict": model.state_dict(),
        "channels_last": True,
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
        "precision": "fp32",
        "tta_flip": False,
    }
    item = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    top5 = eager_predictor(ckpt, torch.device("cpu"), topk=5)(item)
    top1 = eager_predictor(ckpt, torch.device("cpu"))(item)
    assert isinstance(top5, list) and len(set(top5)) == 5 and top5[0] == top1


# 10 classes, hand-built logits (no ties): label, and where the label ranks among the
# item's scores (1 = best). Top-1 hits 1 item of 6, top-5 hits 4 (ranks 1, 2, 5 and 3).
_RANKED = [(3, 1), (7, 2), (0, 5), (9, 6), (2, 10), (5, 3)]


def _hand_built_logits() -> tuple[torch.Tensor, torch.Tensor]:
    rows, labels = [], []
    for i, (label, rank) in enumerate(_RANKED):
        others = [c for c in range(10) if c != label]
        others = others[i % 9 :] + others[: i % 9]  # a different order of the wrong classes per item
        order = others[: rank - 1] + [label] + others[rank - 1 :]  # classes from best to worst
        row = torch.empty(10)
        row[torch.tensor(order)] = torch.linspace(4.0, -5.0, 10) + 0.1 * i
        rows.append(row)
        labels.append(label)
    return torch.stack(rows), torch.tensor(labels)


def test_topk_correct_counts_on_hand_built_logits():
    """top-k over the classes of each item, k inclusive, k < classes: a top-k over
    the items (dim 0), an off-by-one in k, or "k >= classes -> correct" fails here."""
    from dawnpipe.train.torch_trainer import topk_correct

    logits, labels = _hand_built_logits()
    ranks = [int((row > row[label]).sum()) + 1 for row, label in zip(logits, labels.tolist())]
    assert ranks == [rank for _, rank in _RANKED]  # the logits are what the table says
    assert topk_correct(logits, labels, (1, 5)) == {1: 1, 5: 4}
    assert topk_correct(logits, labels, (1, 2, 3, 5, 6, 10)) == {1: 1, 2: 2, 3: 3, 5: 4, 6: 5, 10: 6}
    # fewer classes than k: every label is among the answers (top-5 of 3 classes)
    few = torch.tensor([[0.1, 0.5, 0.2], [0.9, 0.0, 0.3]])
    assert topk_correct(few, torch.tensor([0, 1]), (1, 5)) == {1: 0, 5: 2}


def test_evaluate_reports_top1_and_top5_in_percent():
    """evaluate() of the trainer on a model that answers the hand-built logits."""
    from dawnpipe.train.torch_trainer import evaluate

    logits, labels = _hand_built_logits()
    images = torch.arange(len(labels), dtype=torch.uint8).reshape(-1, 1, 1, 1)  # pixel = item number

    class Lookup(torch.nn.Module):
        def forward(self, x):
            return logits[(x[:, 0, 0, 0] * 255).round().long()]

    hp = {"channels_last": False, "eval_batch_size": 4, "precision": "fp32", "tta_flip": False}
    metrics, _ = evaluate(Lookup(), images, labels, lambda x: x, hp, torch.device("cpu"), ["top1Accuracy", "top5Accuracy"])
    assert metrics == pytest.approx({"top1Accuracy": 100 / 6, "top5Accuracy": 400 / 6})


def test_top5_inference_answers_on_hand_built_logits():
    """The inference answer for top-5 tasks: the five best classes of the item, best first."""
    from dawnpipe.infer.torch_model import as_predict_fn

    logits, labels = _hand_built_logits()
    table = dict(enumerate(logits))
    predict = as_predict_fn(lambda x: table[int(x.flatten()[0])][None], torch.device("cpu"), topk=5)
    for i, (label, rank) in enumerate(_RANKED):
        answer = predict(np.array([[i]], dtype=np.uint8))
        assert answer == logits[i].argsort(descending=True)[:5].tolist() and len(answer) == 5
        assert (label in answer) == (rank <= 5)


@pytest.mark.slow
def test_imagenet_end_to_end_through_snakemake(sources, tmp_path):
    """config/test-imagenet.yaml on the archives served from 127.0.0.1:
    fetch (generated checksums), prepare shards, train the 1/8-width ResNet-50
    for 2 epochs streaming from the shards, extract, infer (top-5), report."""
    work = copy_project(tmp_path / "project")
    config = resolved_config(work, "config/test-imagenet.yaml")
    config["data_sources"] = {"imagenet": sources["url"]}
    config["data_checksums"] = {"imagenet": str(sources["expect"])}
    (work / "config" / "run.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(work, "results/leaderboard.html", "--configfile", "config/run.yaml")
    manifest = json.loads((work / "data" / "prepared" / "imagenet" / "manifest.json").read_text())
    assert manifest["format"] == "npy-uint8-shards" and manifest["classes"] == WNIDS
    run = work / "results" / "runs" / "smoke-resnet50-imagenet" / "seed0"
    tsv = (run / "train.tsv").read_text().splitlines()
    assert tsv[0] == "epoch\thours\ttop1Accuracy\ttop5Accuracy" and len(tsv) == 3
    for line in tsv[1:]:  # 7 classes: top-5 is measured, not 100% by construction
        top1, top5 = float(line.split("\t")[2]), float(line.split("\t")[3])
        assert 0.0 <= top1 <= top5 <= 100.0
        assert round(top5 * 14 / 100, 6).is_integer()  # a count of the 14 validation images
    latency = json.loads((run / "latency.json").read_text())
    assert latency["metric"] == "top5Accuracy" and latency["items"] == 14
    assert round(latency["accuracy"] * 14 / 100, 6).is_integer()
    tta = json.loads((run / "time_to_accuracy.json").read_text())
    assert tta  # extracted
    board = json.dumps(json.loads((work / "results" / "leaderboard.json").read_text()))
    assert "imagenet" in board and "smoke-resnet50-imagenet" in board
    assert os.path.getsize(work / "results" / "leaderboard.html") > 0


def test_prepare_workers_option_sets_the_processes_and_not_the_result(sources, tmp_path):
    raw = tmp_path / "raw"
    run_cli("fetch", "imagenet", "--dest", str(raw), "--source", str(sources["folders"]), check=True)
    outs = {}
    for n in (1, 2):
        outs[n] = tmp_path / f"p{n}"
        proc = run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(outs[n]), "--workers", str(n), check=True)
        assert "into 1 shards of 160x160 with 1 processes" in proc.stdout  # 1024 items a shard: one process is all it can use
    m1, m2 = (json.loads((outs[n] / "manifest.json").read_text()) for n in (1, 2))
    assert m1["splits"]["train"]["images"]["shards"] == m2["splits"]["train"]["images"]["shards"]  # same files, same sha256
    for bad in ("0", "two"):
        proc = run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(tmp_path / "bad"), "--workers", bad)
        assert proc.returncode == 2 and "--workers" in proc.stderr and "Traceback" not in proc.stderr
