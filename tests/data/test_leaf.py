"""LEAF's FEMNIST and Shakespeare (fedbench/data/leaf.py) read from small fake files in LEAF's JSON layout and in
TFF's HDF5 layout, the download of TFF's release (served from a local archive), LEAF's CNN and character LSTM, and
the example scenarios at the tiny scale on fake data."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedbench import api
from fedbench.data import DatasetNotFoundError, leaf as leaf_module, load_dataset, missing
from fedbench.data.leaf import LETTERS, TFF, TffArchive, encode
from fedbench.models import build_model, count_parameters
from fedbench.store import ResultsStore
from tests.data.fakes import (
    fake_femnist,
    fake_shakespeare,
    femnist_users,
    shakespeare_users,
    write_leaf_json,
    write_tff_h5,
)

EXAMPLES = Path(__file__).parents[2] / "configs" / "examples"


def test_femnist_json_keeps_each_writer_as_a_client(tmp_path: Path):
    train, test = femnist_users(5, 4, 1), femnist_users(5, 2, 2)
    write_leaf_json(tmp_path / "femnist" / "data" / "train", train, files=2)
    write_leaf_json(tmp_path / "femnist" / "data" / "test", test, files=1)
    splits = load_dataset("femnist", {}, tmp_path, download=False)
    order = [u for k in range(2) for u in list(train)[k::2]]  # sorted files, then each file's users
    x = np.asarray([row for u in order for row in train[u][0]], dtype=np.float32)
    mean, std = x.mean(dtype=np.float64), x.std(dtype=np.float64)
    assert splits.input_shape == (1, 28, 28) and splits.num_classes == 62
    torch.testing.assert_close(splits.train.x, torch.from_numpy((x.reshape(-1, 1, 28, 28) - mean) / std).float())
    assert splits.train.y.tolist() == [y for u in order for y in train[u][1]]
    assert splits.client_ids.tolist() == [i for i, u in enumerate(order) for _ in train[u][1]]
    assert len(splits.test) == 10 and splits.test.y.tolist() == [y for u in order for y in test[u][1]]
    assert float(splits.train.x.mean()) == pytest.approx(0.0, abs=1e-5)  # the training split's statistics


def test_users_keeps_the_first_writers_and_their_test_samples(tmp_path: Path):
    fake_femnist(tmp_path, n_users=6, train=3, test=2)
    splits = load_dataset("femnist", {"users": 2}, tmp_path, download=False)
    assert sorted(set(splits.client_ids.tolist())) == [0, 1] and len(splits.train) == 6 and len(splits.test) == 4
    with pytest.raises(ValueError, match="users=9, but the training files hold 6 clients"):
        load_dataset("femnist", {"users": 9}, tmp_path, download=False)


def test_leaf_user_split_tests_on_the_other_users(tmp_path: Path):
    write_leaf_json(tmp_path / "femnist" / "data" / "train", femnist_users(3, 2, 1))
    write_leaf_json(tmp_path / "femnist" / "data" / "test", {"other": femnist_users(1, 5, 2)["f0000_00"]})
    assert len(load_dataset("femnist", {}, tmp_path, download=False).test) == 5


def test_shakespeare_encodes_characters_as_leaf_does(tmp_path: Path):
    fake_shakespeare(tmp_path, n_users=3, train=4, test=2)
    users = shakespeare_users(3, 4)
    splits = load_dataset("shakespeare", {}, tmp_path, download=False)
    assert splits.input_shape == (80,) and splits.num_classes == 80 == len(LETTERS)
    order = [u for k in range(2) for u in list(users)[k::2]]
    expected = [[LETTERS.find(c) for c in x] for u in order for x in users[u][0]]  # LEAF's word_to_indices
    assert splits.train.x.to(torch.int64).tolist() == expected
    assert splits.train.y.tolist() == [LETTERS.find(y) for u in order for y in users[u][1]]
    assert encode("a$") == [LETTERS.find("a"), 80]  # a character out of LEAF's 80: the embedding's extra row


def test_a_target_out_of_the_vocabulary_is_dropped(tmp_path: Path):
    users = {"R": (["x" * 80, "y" * 80, "z" * 80], ["a", "$", "b"])}
    write_leaf_json(tmp_path / "shakespeare" / "data" / "train", users, files=1)
    write_leaf_json(tmp_path / "shakespeare" / "data" / "test", users, files=1)
    splits = load_dataset("shakespeare", {}, tmp_path, download=False)
    assert splits.train.y.tolist() == [LETTERS.find("a"), LETTERS.find("b")]


def _tff_femnist(folder: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    clients = {
        f"w{i}": {"pixels": rng.random((i + 2, 28, 28), dtype=np.float32), "label": np.arange(i + 2)} for i in range(3)
    }
    write_tff_h5(folder / "fed_emnist_train.h5", clients)
    write_tff_h5(folder / "fed_emnist_test.h5", {c: {k: v[:1] for k, v in f.items()} for c, f in clients.items()})
    return clients


def test_femnist_reads_tff_hdf5(tmp_path: Path):
    clients = _tff_femnist(tmp_path / "femnist")
    assert missing(["femnist"], tmp_path) == []  # TFF's layout instead of LEAF's
    splits = load_dataset("femnist", {}, tmp_path, download=False)
    assert splits.client_ids.tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 2] and len(splits.test) == 3
    assert splits.train.y.tolist() == [0, 1, 0, 1, 2, 0, 1, 2, 3]
    raw = np.concatenate([clients[c]["pixels"] for c in ("w0", "w1", "w2")]).astype(np.float64)
    expected = (raw - raw.mean()) / raw.std()
    np.testing.assert_allclose(splits.train.x.numpy()[:, 0], expected, atol=1e-5)


def test_shakespeare_from_tff_snippets_makes_leaf_windows(tmp_path: Path):
    text = "First Citizen speaks: " * 12
    snippets = np.array([text[:70].encode(), text[70:].encode()], dtype=object)
    write_tff_h5(tmp_path / "shakespeare" / "shakespeare_train.h5", {"CIT": {"snippets": snippets}})
    write_tff_h5(
        tmp_path / "shakespeare" / "shakespeare_test.h5",
        {"CIT": {"snippets": snippets[1:]}, "X": {"snippets": snippets}},
    )
    splits = load_dataset("shakespeare", {}, tmp_path, download=False)
    joined = text[:70] + "\n" + text[70:]
    assert len(splits.train) == len(joined) - 80
    assert splits.train.x[3].to(torch.int64).tolist() == encode(joined[3:83])
    assert int(splits.train.y[3]) == LETTERS.find(joined[83])
    assert len(splits.test) == len(text) - 70 - 80  # the kept role's test text; role X is not kept


def _archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fed_emnist.tar.bz2 with TFF's two files, its SHA-256 put in TFF's table, and urlretrieve serving it."""
    source = tmp_path / "src"
    _tff_femnist(source)
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w:bz2") as tar:
        for name in ("fed_emnist_train.h5", "fed_emnist_test.h5"):
            tar.add(source / name, arcname=f"datasets/{name}")
    served = tmp_path / "served.tar.bz2"
    served.write_bytes(blob.getvalue())
    tff = TFF["femnist"]
    monkeypatch.setitem(
        TFF, "femnist", TffArchive(tff.archive, hashlib.sha256(blob.getvalue()).hexdigest(), tff.train, tff.test)
    )
    urls: list[str] = []

    def retrieve(url: str, path: Path) -> None:
        urls.append(url)
        Path(path).write_bytes(served.read_bytes())

    monkeypatch.setattr(leaf_module.urllib.request, "urlretrieve", retrieve)
    return served


def test_download_fetches_tff_release_checks_it_and_extracts_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _archive(tmp_path, monkeypatch)
    data = tmp_path / "data"
    assert [m.name for m in missing(["femnist"], data)] == ["femnist"]
    assert missing(["femnist"], data, download=True) == []  # the run fetches it
    with pytest.raises(DatasetNotFoundError, match="pass --download to fetch TFF's"):
        load_dataset("femnist", {}, data, download=False)
    splits = load_dataset("femnist", {}, data, download=True)
    assert len(splits.train) == 9 and (data / "femnist" / "fed_emnist_train.h5").exists()


def test_a_download_with_the_wrong_checksum_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _archive(tmp_path, monkeypatch)
    monkeypatch.setitem(TFF, "femnist", TffArchive(TFF["femnist"].archive, "0" * 64, "a.h5", "b.h5"))
    with pytest.raises(DatasetNotFoundError, match="expected 0000"):
        load_dataset("femnist", {}, tmp_path / "data", download=True)
    assert not (tmp_path / "data" / "femnist" / "fed_emnist.tar.bz2").exists()  # not kept for the next try


def test_missing_leaf_data_says_both_layouts():
    [m] = missing(["shakespeare"], Path("/nowhere"))
    assert m.line() == (
        "dataset shakespeare: not in /nowhere/shakespeare/ (pass --download to fetch it (TFF's shakespeare_train.h5 "
        "and shakespeare_test.h5) into /nowhere/shakespeare/, put LEAF's JSON (preprocess.sh) in "
        "/nowhere/shakespeare/data/train/ and data/test/, or --data-dir to the folder that holds shakespeare/)"
    )


def test_leaf_cnn_has_leaf_size():
    assert count_parameters(build_model("leaf_cnn", {}, (1, 28, 28), 62)) == 6_603_710


def test_char_lstm_equals_torch_lstm_with_the_same_weights():
    """The written-out LSTM against ``nn.LSTM`` (independent reference): same gates, same order."""
    torch.manual_seed(0)
    model = build_model("char_lstm", {"hidden": 12, "embed": 5, "layers": 2}, (9,), 80)
    reference = torch.nn.LSTM(5, 12, 2, batch_first=True)
    with torch.no_grad():
        for k in range(2):
            getattr(reference, f"weight_ih_l{k}").copy_(model.inputs[k].weight)
            getattr(reference, f"bias_ih_l{k}").copy_(model.inputs[k].bias)
            getattr(reference, f"weight_hh_l{k}").copy_(model.recurrent[k].weight)
            getattr(reference, f"bias_hh_l{k}").zero_()
    x = torch.randint(0, 81, (4, 9)).float()
    out, _ = reference(model.embedding(x.long()))
    torch.testing.assert_close(model(x), model.fc(out[:, -1]))
    assert model.inputs[0].bias[12:24].eq(1).all()  # TF's forget_bias


def test_char_lstm_batches_over_clients_with_vmap():
    """What the batched executor does: functional_call of the LSTM under vmap over client rows."""
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(1)
    model = build_model("char_lstm", {"hidden": 8}, (6,), 80)
    names = [n for n, _ in model.named_parameters()]
    rows = [torch.stack([p.detach() + 0.01 * k for k in range(3)]) for _, p in model.named_parameters()]
    x, y = torch.randint(0, 80, (3, 4, 6)).float(), torch.randint(0, 80, (3, 4))

    def loss(params, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(model, dict(zip(names, params)), (xb,)), yb)

    batched = vmap(grad(loss))(rows, x, y)
    for k in range(3):
        alone = grad(loss)([r[k] for r in rows], x[k], y[k])
        for b, a in zip(batched, alone):
            torch.testing.assert_close(b[k], a)


@pytest.mark.parametrize("example, fake", [("femnist_leaf", fake_femnist), ("shakespeare_leaf", fake_shakespeare)])
def test_the_examples_run_at_the_tiny_scale_on_fake_files(tmp_path: Path, example: str, fake):
    """configs/examples/{femnist,shakespeare}_leaf.yaml: FedAvg, FedProx, SCAFFOLD and FedAdam, natural partition."""
    fake(tmp_path / "data")
    api.run(EXAMPLES / f"{example}.yaml", tmp_path / "out", scale="tiny", data_dir=tmp_path / "data")
    runs = ResultsStore(tmp_path / "out").runs()
    assert set(runs["status"]) == {"finished"} and len(runs) == 4


def test_the_lstm_trains_alike_on_both_executors(tmp_path: Path):
    fake_shakespeare(tmp_path / "data")
    cols = ["round", "test_acc", "test_loss", "train_loss"]
    frames = []
    for executor in ("sequential", "batched"):
        api.run(
            EXAMPLES / "shakespeare_leaf.yaml",
            tmp_path / executor,
            scale="tiny",
            only="fedavg",
            data_dir=tmp_path / "data",
            executor=executor,
        )
        store = ResultsStore(tmp_path / executor)
        frames.append(store.metrics().sort_values("round")[cols].reset_index(drop=True))
    pd.testing.assert_frame_equal(frames[0], frames[1], rtol=1e-9, atol=1e-9)


def test_clients_other_than_the_users_kept_is_one_line_and_nothing_written(tmp_path: Path):
    from typer.testing import CliRunner

    from fedbench.cli import app

    fake_femnist(tmp_path / "data")
    args = ["run", str(EXAMPLES / "femnist_leaf.yaml"), "--scale", "tiny", "--data-dir", str(tmp_path / "data")]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--set", "clients.num=7"])
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    assert result.output.strip() == (
        "clients.num: 7 clients, but dataset femnist keeps 6 writers or roles (dataset.users), each a client of the "
        "natural partition; set clients.num to 6"
    )
