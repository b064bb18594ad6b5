"""The data layouts a program's loader reads (dawnpipe.data.layouts), read by
the real readers: torchvision's FashionMNIST and ImageFolder, numpy as
keras.datasets loads its .npz (allow_pickle=False); each holds exactly the
items it is given, in their order, and never an item held back."""

from __future__ import annotations

import os
import pickle
import stat

import numpy as np
import pytest
from conftest import run_cli
from vision_data import WNIDS, imagenet_files, write_imagenet_folders

from dawnpipe.data.arrays import save_split
from dawnpipe.data.layouts import WRITERS, layout_refusal, write_layout
from dawnpipe.data.loader import load_split
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_json
from dawnpipe.programs.data_layouts import AVAILABLE


def prepared(root, task, shape, n_train=300, n_test=120, classes=10, seed=0):
    """A tiny prepared set in dawnpipe's layout (manifest.json + .npy), every item distinct."""
    rng = np.random.default_rng(seed)
    names = [f"class{i}" for i in range(classes)]
    root.mkdir(parents=True)
    splits = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        images.reshape(n, -1)[:, 0] = np.arange(n) % 256  # first pixels distinct item to item: no two alike
        images.reshape(n, -1)[:, 1] = np.arange(n) // 256
        splits[split] = save_split(root, split, images, rng.integers(0, classes, n), names, None)
    write_json(root / "manifest.json", {"task": task, "format": "npy-uint8", "classes": names, "splits": splits})
    return root


def selection(n, keep_back, seed=1):
    """A shuffled selection of n items less the ``keep_back`` positions (as the harness draws its held-back items)."""
    order = np.random.default_rng(seed).permutation(n)
    return np.array([i for i in order if i not in set(keep_back)]), np.array(sorted(keep_back))


def as_keys(images) -> set[bytes]:
    return {np.ascontiguousarray(x).tobytes() for x in images}


# ------------------------------------------------------------------ Fashion-MNIST
def test_torchvision_reads_the_fashion_mnist_layout_of_real_data(prepared_fashion_mnist, tmp_path):
    from torchvision.datasets import FashionMNIST

    train_index = np.arange(0, 60000, 7)  # the items a program is given ...
    test_index, held = selection(10000, keep_back=range(0, 10000, 5))  # ... and the test items kept back
    root = write_layout("torchvision", prepared_fashion_mnist, tmp_path / "tv", train_index, test_index, "fashion-mnist")
    assert root == tmp_path / "tv"
    assert sorted(os.listdir(root / "FashionMNIST" / "raw")) == sorted(
        ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    )
    full = {s: load_split(prepared_fashion_mnist, s) for s in ("train", "test")}
    for train, index in ((True, train_index), (False, test_index)):
        ds = FashionMNIST(str(root), train=train, download=False)
        split = full["train" if train else "test"]
        assert len(ds) == len(index)
        assert np.array_equal(ds.data.numpy(), np.asarray(split.images)[index])
        assert np.array_equal(ds.targets.numpy(), split.labels[index])
        image, label = ds[3]
        assert np.array_equal(np.asarray(image), np.asarray(split.images[index[3]])) and label == split.labels[index[3]]
    test = FashionMNIST(str(root), train=False, download=False).data.numpy()
    assert not as_keys(test) & as_keys(np.asarray(full["test"].images)[held])  # never an item kept back


def test_keras_style_loading_reads_the_fashion_mnist_npz(tmp_path):
    data = prepared(tmp_path / "fmnist", "fashion-mnist", (28, 28))
    train_index, test_index = np.arange(300)[::-2], np.array([5, 0, 77, 119])
    path = write_layout("npz", data, tmp_path / "npz", train_index, test_index, "fashion-mnist")
    assert path == tmp_path / "npz" / "fashion_mnist.npz"
    with np.load(path, allow_pickle=False) as z:  # what keras.datasets' loaders return, key for key
        assert sorted(z.files) == ["x_test", "x_train", "y_test", "y_train"]
        (x_train, y_train), (x_test, y_test) = (z["x_train"], z["y_train"]), (z["x_test"], z["y_test"])
    train, test = load_split(data, "train"), load_split(data, "test")
    assert x_train.dtype == y_train.dtype == np.uint8 and x_train.shape == (150, 28, 28) and y_train.shape == (150,)
    assert np.array_equal(x_train, train.images[train_index]) and np.array_equal(y_train, train.labels[train_index])
    assert np.array_equal(x_test, test.images[test_index]) and np.array_equal(y_test, test.labels[test_index])


# ------------------------------------------------------------------ CIFAR-10
def test_cifar10_npz_has_keras_shapes_and_only_the_selection(tmp_path):
    data = prepared(tmp_path / "cifar", "cifar10", (32, 32, 3))
    test_index, held = selection(120, keep_back=[3, 50, 51, 118])
    path = write_layout("npz", data, tmp_path / "npz", np.arange(200), test_index, "cifar10")
    with np.load(path, allow_pickle=False) as z:
        x_train, y_train, x_test, y_test = z["x_train"], z["y_train"], z["x_test"], z["y_test"]
    assert path.name == "cifar10.npz"
    assert (x_train.shape, x_train.dtype, y_train.shape, y_train.dtype) == ((200, 32, 32, 3), np.uint8, (200, 1), np.uint8)
    assert (x_test.shape, y_test.shape) == ((116, 32, 32, 3), (116, 1))
    test = load_split(data, "test")
    assert np.array_equal(x_test, test.images[test_index]) and np.array_equal(y_test[:, 0], test.labels[test_index])
    assert not as_keys(x_test) & as_keys(test.images[held])


def test_torchvisions_cifar10_refuses_a_subset_so_the_layout_is_refused(tmp_path):
    """What torchvision does with CIFAR-10 files that hold a selection: its MD5
    check refuses them, download=False or not, before reading a byte. So the
    layout refuses to be made, naming the entry field and why."""
    from torchvision.datasets import CIFAR10

    base = tmp_path / "root" / "cifar-10-batches-py"
    base.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (10, 3072), dtype=np.uint8), "labels": rng.integers(0, 10, 10).tolist()}
        (base / name).write_bytes(pickle.dumps(batch, protocol=2))
    (base / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}, protocol=2))
    with pytest.raises(RuntimeError, match="Dataset not found or corrupted"):
        CIFAR10(str(tmp_path / "root"), train=True, download=False)

    data = prepared(tmp_path / "cifar", "cifar10", (32, 32, 3))
    with pytest.raises(DawnpipeError) as e:
        write_layout("torchvision", data, tmp_path / "tv", np.arange(10), np.arange(10), "cifar10", field="program.command[4]")
    assert str(e.value).startswith("field 'program.command[4]': the torchvision layout of cifar10 cannot be given: torchvision's CIFAR10 checks the MD5")
    assert "{npz}" in str(e.value) and not (tmp_path / "tv").exists()
    assert layout_refusal("torchvision", "cifar10") == str(e.value).removeprefix("field 'program.command[4]': ")


# ------------------------------------------------------------------ ImageNet
def test_imagefolder_reads_the_imagenet_layout(tmp_path):
    from torchvision.datasets import ImageFolder

    raw, data = tmp_path / "raw", tmp_path / "prepared"
    source = write_imagenet_folders(tmp_path / "ilsvrc", *imagenet_files(per_class=3, n_val=8))
    run_cli("fetch", "imagenet", "--dest", str(raw), "--source", str(source), check=True)
    run_cli("prepare", "imagenet", "--raw", str(raw), "--out", str(data), check=True)
    train, test = load_split(data, "train"), load_split(data, "test")
    train_index = np.arange(len(train.labels))[1:]  # all but the first training item
    test_index, held = selection(len(test.labels), keep_back=[0, 5])
    root = write_layout("torchvision", data, tmp_path / "tv", train_index, test_index, "imagenet")
    assert sorted(os.listdir(root)) == ["train", "val"]
    assert sorted(os.listdir(root / "val")) == sorted(os.listdir(root / "train")) == WNIDS  # every class, so the numbering is dawnpipe's
    for folder, split, index in (("train", train, train_index), ("val", test, test_index)):
        ds = ImageFolder(str(root / folder), allow_empty=True)
        assert ds.classes == WNIDS and len(ds) == len(index)
        got = {os.path.basename(p): (np.asarray(ds.loader(p)), label) for p, label in ds.samples}
        for item in index:
            image, label = got[f"{'train' if folder == 'train' else 'test'}_{item:08d}.png"]
            assert np.array_equal(image, split.images[int(item)]) and label == split.labels[item]  # lossless: the very pixels dawnpipe scores
    files = [p for p, _ in ImageFolder(str(root / "val"), allow_empty=True).samples]
    assert not as_keys(np.asarray(ImageFolder(str(root / "val"), allow_empty=True).loader(p)) for p in files) & as_keys(test.images[held])
    mode = os.stat(files[0]).st_mode
    assert not os.path.islink(files[0]) and stat.S_ISREG(mode) and not mode & 0o222  # a copy, read-only: no link into the user's files


# ------------------------------------------------------------------ selection, atomicity
def test_a_bad_selection_is_one_line_and_writes_nothing(tmp_path):
    data = prepared(tmp_path / "fmnist", "fashion-mnist", (28, 28))
    out = tmp_path / "npz"
    cases = [
        (np.array([0, 300]), "train_index: position 300 is outside the 300 items of the prepared train split"),
        (np.array([1, 1]), "train_index: an item is given more than once"),
        (np.array([0.5]), "train_index: expected a one-dimensional array of integer positions, got float64"),
        (np.array([-1]), "train_index: position -1 is outside"),
    ]
    for index, message in cases:
        with pytest.raises(DawnpipeError, match=message.replace("(", r"\(")):
            write_layout("npz", data, out, index, np.arange(3), "fashion-mnist")
    with pytest.raises(DawnpipeError, match="data prepared for task 'fashion-mnist', not 'cifar10'"):
        write_layout("npz", data, out, np.arange(3), np.arange(3), "cifar10")
    assert layout_refusal("npz", "imagenet").startswith("the npz layout of imagenet cannot be given: keras.datasets has no ImageNet")
    assert layout_refusal("torchvision", "squad") == "no torchvision layout for task squad (it exists for fashion-mnist, imagenet)"
    assert layout_refusal("tfds", "cifar10") == "no data layout 'tfds' (known: torchvision, npz)"
    assert set(WRITERS) == AVAILABLE  # what the entry check accepts is what can be written
    assert os.listdir(tmp_path) == ["fmnist"]  # no layout, no temporary left behind


def test_a_layout_replaces_the_old_one_whole(tmp_path):
    data = prepared(tmp_path / "fmnist", "fashion-mnist", (28, 28))
    first = write_layout("npz", data, tmp_path / "npz", np.arange(10), np.arange(4), "fashion-mnist")
    (tmp_path / "npz" / "stale").write_text("from before")
    second = write_layout("npz", data, tmp_path / "npz", np.arange(20), np.arange(4), "fashion-mnist")
    assert first == second and sorted(os.listdir(tmp_path / "npz")) == ["fashion_mnist.npz"]
    with np.load(second, allow_pickle=False) as z:
        assert len(z["x_train"]) == 20
    assert sorted(os.listdir(tmp_path)) == ["fmnist", "npz"]
