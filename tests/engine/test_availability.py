"""Client availability and stragglers (``clients.availability``, ``clients.stragglers``;
fedbench/engine/availability.py): sampling only among the available clients, each model's draws against an
independent computation from the same streams, seeded and resumable, stragglers' partial work and missed
rounds, the realised participation in the logs, and bad input naming its key."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from fedbench.engine.availability import ClientAvailability, Stragglers
from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.options import RunOptions
from fedbench.scenario import ScenarioError, parse_scenario, resolve_runs
from fedbench.seeding import numpy_stream
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

COLS = ["test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]
N, S = 20, 5


def spec_with(availability=None, stragglers=None, algorithm="fedavg", **top):
    changes = {"clients.num": N, "clients.per_round": S}
    if availability is not None:
        changes["clients.availability"] = availability
    if stragglers is not None:
        changes["clients.stragglers"] = stragglers
    return resolve_runs(parse_scenario(tiny_scenario(changes, algorithms=[{"name": algorithm}], **top)))[0]


def train(tmp_path, spec, name="out", seed=0, on_round=None, options=RunOptions()):
    store = ResultsStore(tmp_path / name)
    out = execute_run(spec, seed, store, DataCache(tmp_path, False, torch.device("cpu")), "h", on_round, options)
    return store, out


def logs(store, run_id):
    rows = store.metrics([run_id])
    return [json.loads(e) for e in rows.sort_values("round")["extra"]]


def test_always_is_plain_federated_learning_bit_for_bit(tmp_path):
    plain, plain_out = train(tmp_path, spec_with(), "plain")
    always, always_out = train(tmp_path, spec_with({"kind": "always"}), "always")
    pd.testing.assert_frame_equal(plain.metrics([plain_out.run_id])[COLS], always.metrics([always_out.run_id])[COLS])
    assert spec_with().spec_hash() != spec_with({"kind": "always"}).spec_hash()  # the block is part of the run


def test_bernoulli_samples_only_available_clients_from_the_seeded_streams(tmp_path):
    spec = spec_with({"kind": "bernoulli", "p": 0.3}, rounds=6)
    plugin = ClientAvailability(spec, 7, None)
    for t in range(1, 7):
        want = numpy_stream(7, "availability", t).random(N) < 0.3  # an independent draw from the same stream
        assert (plugin.available(t) == want).all()
        eligible = np.flatnonzero(want)
        chosen = plugin.choose_clients(t, lambda e: np.sort(e[: min(S, len(e))]))
        assert set(chosen.tolist()) <= set(eligible.tolist()) and len(chosen) == min(S, len(eligible))
    store, out = train(tmp_path, spec)
    entries = logs(store, out.run_id)
    assert [e["available"] for e in entries] == [
        int((numpy_stream(0, "availability", t).random(N) < 0.3).sum()) for t in range(1, 7)
    ]
    assert all(e["sampled"] == min(S, e["available"]) for e in entries)


def test_per_client_probabilities_are_drawn_once_in_their_range():
    plugin = ClientAvailability(spec_with({"kind": "bernoulli", "p_range": [0.2, 0.6]}), 3, None)
    assert np.array_equal(plugin.p, numpy_stream(3, "availability_p").uniform(0.2, 0.6, size=N))
    assert plugin.p.min() >= 0.2 and plugin.p.max() <= 0.6 and len(set(plugin.p.tolist())) == N


def test_diurnal_probability_follows_the_cycle():
    spec = spec_with({"kind": "diurnal", "p": 0.5, "period": 8, "amplitude": 0.8})
    plugin = ClientAvailability(spec, 1, None)
    for t in (1, 2, 6):
        p_t = min(1.0, max(0.0, 0.5 * (1 + 0.8 * math.sin(2 * math.pi * t / 8))))
        assert (plugin.available(t) == (numpy_stream(1, "availability", t).random(N) < p_t)).all()


def test_markov_chain_against_an_independent_walk():
    a, b = 0.8, 0.6
    plugin = ClientAvailability(spec_with({"kind": "markov", "stay_on": a, "stay_off": b}), 2, None)
    on = numpy_stream(2, "availability", 1).random(N) < (1 - b) / (2 - a - b)
    assert (plugin.available(1) == on).all()
    for t in range(2, 6):
        u = numpy_stream(2, "availability", t).random(N)
        on = np.where(on, u < a, u >= b)
    assert (plugin.available(5) == on).all()  # rounds 2–4 drawn on the way


def test_a_markov_run_resumes_exactly(tmp_path):
    spec = spec_with({"kind": "markov", "stay_on": 0.7, "stay_off": 0.5}, rounds=6, checkpoint_every=2)
    whole, whole_out = train(tmp_path, spec, "whole")

    def stop(t, metrics):
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, spec, "resumed", on_round=stop)
    resumed, out = train(tmp_path, spec, "resumed")
    assert out.status == "finished"
    pd.testing.assert_frame_equal(whole.metrics([whole_out.run_id])[COLS], resumed.metrics([out.run_id])[COLS])
    assert logs(whole, whole_out.run_id)[-1]["available"] == logs(resumed, out.run_id)[-1]["available"]


def test_no_available_client_is_an_idle_round(tmp_path):
    store, out = train(tmp_path, spec_with({"kind": "bernoulli", "p": 1e-9}, rounds=2))
    rows = store.metrics([out.run_id])
    assert out.status == "finished" and (rows["bits_up"] == 0).all() and rows["train_loss"].isna().all()


def test_partial_stragglers_do_part_of_their_steps():
    plugin = Stragglers(spec_with(stragglers={"fraction": 0.4, "work": [0.25, 0.5]}), 5, None)
    steps = plugin.local_steps(3, list(range(S)), [8] * S)
    rng = numpy_stream(5, "stragglers", 3)
    rows = np.sort(rng.choice(S, size=2, replace=False))
    work = rng.uniform(0.25, 0.5, size=2)
    want = [8] * S
    for row, u in zip(rows, work):
        want[row] = math.ceil(u * 8)
    assert steps == want and sum(s < 8 for s in steps) == 2


def test_dropped_stragglers_miss_the_round(tmp_path):
    spec = spec_with(stragglers={"fraction": 0.4, "mode": "drop"}, rounds=3)
    store, out = train(tmp_path, spec)
    assert [e["participants"] for e in logs(store, out.run_id)] == [S - 2] * 3
    plain, plain_out = train(tmp_path, spec_with(rounds=3), "plain")
    assert (store.metrics([out.run_id])["bits_up"] < plain.metrics([plain_out.run_id])["bits_up"]).all()


def test_partial_stragglers_train_fewer_steps_on_both_executors(tmp_path):
    """The batched executor trains the stragglers' shorter K_i as the sequential one does."""
    spec = spec_with(stragglers={"fraction": 0.6}, rounds=3, local={"iterations": 6, "batch_size": 16, "lr": 0.1})
    seq, seq_out = train(tmp_path, spec, "seq", options=RunOptions(executor="sequential"))
    bat, bat_out = train(tmp_path, spec, "bat", options=RunOptions(executor="batched"))
    pd.testing.assert_frame_equal(
        seq.metrics([seq_out.run_id])[COLS], bat.metrics([bat_out.run_id])[COLS], rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize(
    "block, needle",
    [
        (
            {"availability": {"kind": "bernoulli"}},
            "clients.availability: kind bernoulli needs exactly one of p or p_range",
        ),
        ({"availability": {"kind": "markov", "stay_on": 0.5}}, "kind markov needs stay_off"),
        ({"availability": {"kind": "always", "p": 0.5}}, "kind always takes no p"),
        ({"availability": {"kind": "bernoulli", "p_range": [0.5, 0.2]}}, "p_range must satisfy 0 < lo ≤ hi ≤ 1"),
        ({"availability": {"kind": "sometimes"}}, "clients.availability.kind"),
        ({"stragglers": {"fraction": 0}}, "clients.stragglers.fraction"),
        ({"stragglers": {"fraction": 0.5, "work": [0.0, 0.5]}}, "work must satisfy 0 < lo ≤ hi ≤ 1"),
    ],
)
def test_bad_blocks_name_their_key(block, needle):
    raw = tiny_scenario()
    raw["clients"].update(block)
    with pytest.raises(ScenarioError) as err:
        resolve_runs(parse_scenario(yaml.safe_load(yaml.safe_dump(raw))))
    assert needle in str(err.value), str(err.value)


def test_the_example_runs_at_the_tiny_scale_and_its_table_reports_participation(tmp_path):
    """configs/examples/availability.yaml (FedAvg, MIFA, GradMA-S under Bernoulli availability), tiny scale."""
    from pathlib import Path

    from fedbench import api
    from fedbench.report.tables import format_table, summarize

    path = Path(__file__).parents[2] / "configs" / "examples" / "availability.yaml"
    api.run(path, tmp_path / "out", scale="tiny")
    store = ResultsStore(tmp_path / "out")
    assert set(store.runs()["status"]) == {"finished"} and len(store.runs()) == 3
    summary = summarize(store.runs(), store.metrics())
    assert summary["participation"].between(1, 20).all()
    assert "Clients / round" in format_table(summary, "markdown")
    plain, _ = train(tmp_path, spec_with(), "plain")
    assert "participation" not in summarize(plain.runs(), plain.metrics()).columns  # no column without the logs


def test_fedbench_list_shows_every_availability_and_straggler_model():
    from typing import get_args

    from fedbench.catalog import catalog
    from fedbench.scenario.schema import AvailabilitySpec, StragglerSpec

    rows = catalog()["clients"][1:]
    kinds = get_args(AvailabilitySpec.model_fields["kind"].annotation)
    modes = get_args(StragglerSpec.model_fields["mode"].annotation)
    assert tuple(r[1] for r in rows if r[0] == "clients.availability") == kinds
    assert tuple(r[1] for r in rows if r[0] == "clients.stragglers") == modes
