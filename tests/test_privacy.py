"""DP-FedAvg (``privacy``; fedbench/privacy.py), the four checks of issue 28 item 3 — clipping bounds every
row's norm, the noise's scale is z·C/S, the accountant's ε is Opacus's for the same schedule, z = 0 with C = ∞ is
plain FedAvg bit for bit — and adaptive clipping against the paper's update, exact resume, populations, the
table's ε column, ``fedbench list`` and bad input naming its key (exit 2, nothing written)."""

import json
import math

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedbench.algorithms.base import RoundContext, Upload
from fedbench.engine.plugins import Received
from fedbench.engine.runner import RoundLoop, execute_run
from fedbench.engine.setup import DataCache, build_run
from fedbench.options import RunOptions
from fedbench.privacy import DPFedAvg, clip_rows, update_noise_multiplier
from fedbench.scenario import ScenarioError, parse_scenario, resolve_runs
from fedbench.seeding import numpy_stream
from fedbench.store import ResultsStore
from tests.factories import tiny_scenario

opacus = pytest.importorskip("opacus")

COLS = ["test_acc", "test_loss", "train_loss", "bits_up", "bits_down", "consistency"]
N, S = 20, 5
DP = {"clip": 0.5, "noise_multiplier": 1.1}


def spec_with(privacy=DP, algorithm="fedavg", changes=None, **top):
    raw = tiny_scenario({"clients.num": N, "clients.per_round": S, **(changes or {})}, **top)
    raw["algorithms"] = [{"name": algorithm, **({"privacy": privacy} if privacy is not None else {})}]
    return resolve_runs(parse_scenario(raw))[0]


def train(tmp_path, spec, name="out", seed=0, on_round=None, options=RunOptions()):
    store = ResultsStore(tmp_path / name)
    out = execute_run(spec, seed, store, DataCache(tmp_path, False, torch.device("cpu")), "h", on_round, options)
    assert out.status == "finished", out
    return store, out


def logs(store, run_id):
    return [json.loads(e) for e in store.metrics([run_id]).sort_values("round")["extra"]]


def received(rows, t=1):
    """What reaches the server in round t: ``rows`` as the received deltas, with FedAvg's data-size weights."""
    k = len(rows)
    ctx = RoundContext(torch.arange(k), 0.1, torch.ones(k), {"x": torch.zeros(rows.shape[1])}, round=t)
    sizes = torch.arange(1.0, k + 1, dtype=rows.dtype)
    return Received(ctx, Upload({"delta": rows}), [], sizes / sizes.sum(), sizes / sizes.sum())


def served(plugin, rows, t=1):
    """The average the server moves along after the plug-in: Σ_i w_i Δ̃_i with the plug-in's weights."""
    out = plugin.select_received(received(rows, t), None)
    return out.weights @ out.uploads.sent["delta"], out


# -- 1. clipping bounds every row's norm ------------------------------------------------------------------------


def test_clipping_bounds_every_rows_norm():
    gen = torch.Generator().manual_seed(0)
    big = torch.randn(50, generator=gen, dtype=torch.float64) * 10
    small = big / big.norm() * 0.3
    rows = torch.stack([big, -big, small, -small, torch.zeros(50), big * 1e-12, big / big.norm()])
    clipped, norms = clip_rows(rows, 1.0)
    after = clipped.norm(dim=1)
    assert torch.all(after <= 1.0 + 1e-12), after
    assert torch.allclose(norms, rows.norm(dim=1))
    assert torch.allclose(after[:2], torch.ones(2, dtype=torch.float64))  # the long rows land on the sphere
    assert torch.equal(clipped[0], -clipped[1])  # antiparallel rows stay antiparallel
    assert torch.allclose(clipped[0] / after[0], big / big.norm())  # direction kept
    assert torch.equal(clipped[2:], rows[2:])  # rows within C (norm 1 included) are untouched, bit for bit
    assert torch.equal(clipped[4], torch.zeros(50)) and not clipped.isnan().any()  # a zero row stays zero
    assert torch.equal(clip_rows(rows, math.inf)[0], rows)  # C = ∞ clips nothing
    # every row that reaches the server is clipped: the plug-in's rows without noise are the clipped ones
    plugin = DPFedAvg(spec_with({"clip": 1.0, "noise_multiplier": 0.0}), 0, None)
    _, out = served(plugin, rows.float())
    assert torch.all(out.uploads.sent["delta"].norm(dim=1) <= 1.0 + 1e-6)


# -- 2. the noise scale is z·C/S ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dropped", [0, 2])  # all S rows received, or k = S − 2 (stragglers who drop out)
def test_the_noise_on_the_average_has_std_z_C_over_S(dropped):
    z, clip, p = 1.3, 0.7, 4000
    plugin = DPFedAvg(spec_with({"clip": clip, "noise_multiplier": z}), 3, None)
    rows = torch.zeros(S - dropped, p)  # zero updates: the served average is the noise alone
    noise = torch.stack([served(plugin, rows, t)[0] for t in range(1, 11)])
    want = z * clip / S
    assert plugin.noise_std(clip) == pytest.approx(want)
    assert noise.std().item() == pytest.approx(want, rel=0.02)  # 40 000 draws: the std's own error is ~0.4 %
    assert abs(noise.mean().item()) < 4 * want / math.sqrt(noise.numel())
    _, out = served(plugin, rows, 11)
    assert torch.all(out.weights == 1.0 / S)  # the fixed denominator S, not the data-size weights
    again = DPFedAvg(spec_with({"clip": clip, "noise_multiplier": z}), 3, None)
    assert torch.equal(served(again, rows, 4)[0], noise[3])  # the seeded ("privacy", t) stream


def test_adaptive_clipping_noises_the_updates_with_z_delta():
    z, sigma_b = 1.0, 1.0
    spec = spec_with({"clip": 0.5, "noise_multiplier": z, "adaptive_clip": {"count_noise": sigma_b}})
    plugin = DPFedAvg(spec, 0, None)
    z_delta = (z**-2 - (2 * sigma_b) ** -2) ** -0.5  # Andrew et al. 2021, Sec. 3
    assert update_noise_multiplier(z, sigma_b) == pytest.approx(z_delta) and z_delta > z
    assert plugin.noise_std(0.5) == pytest.approx(z_delta * 0.5 / S)
    assert update_noise_multiplier(z, None) == z and update_noise_multiplier(0.0, sigma_b) == 0.0


# -- 3. the accountant's ε is Opacus's for the same schedule ------------------------------------------------------


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_epsilon_equals_opacus_for_the_same_schedule(tmp_path, accountant):
    from opacus.accountants import PRVAccountant, RDPAccountant

    spec = spec_with({**DP, "accountant": accountant}, rounds=4)
    store, out = train(tmp_path, spec)
    delta = 1 / N**1.1
    assert spec.privacy.delta == delta
    reference = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    for t, entry in enumerate(logs(store, out.run_id), start=1):
        reference.step(noise_multiplier=DP["noise_multiplier"], sample_rate=S / N)
        assert entry["epsilon"] == pytest.approx(reference.get_epsilon(delta=delta), rel=1e-9), t
    assert logs(store, out.run_id)[0]["delta"] == delta


def test_adaptive_clipping_accounts_the_overall_z_and_a_given_delta(tmp_path):
    from opacus.accountants import RDPAccountant

    privacy = {"clip": 0.5, "noise_multiplier": 0.9, "delta": 1e-3, "adaptive_clip": {"count_noise": 1.0}}
    store, out = train(tmp_path, spec_with(privacy, rounds=3))
    reference = RDPAccountant()
    for _ in range(3):
        reference.step(noise_multiplier=0.9, sample_rate=S / N)
    assert logs(store, out.run_id)[-1]["epsilon"] == pytest.approx(reference.get_epsilon(delta=1e-3), rel=1e-9)


def test_no_noise_is_no_guarantee():
    plugin = DPFedAvg(spec_with({"clip": 1.0, "noise_multiplier": 0.0}), 0, None)
    assert plugin.round_logs(1)["epsilon"] == 0.0  # nothing released yet
    served(plugin, torch.ones(S, 3))
    assert math.isinf(plugin.round_logs(1)["epsilon"])


# -- 4. z = 0 and C = ∞ is plain FedAvg, bit for bit --------------------------------------------------------------


def final_state(tmp_path, spec, seed=0):
    loop = RoundLoop(spec, seed, build_run(spec, seed, DataCache(tmp_path, False, torch.device("cpu"))))
    metrics = [loop.round(t)[0] for t in range(1, spec.rounds + 1)]
    return loop.state.x, pd.DataFrame(metrics)[COLS]


@pytest.mark.parametrize("algorithm", ["fedavg", "fedadam"])
def test_no_noise_and_no_clip_is_plain_fedavg_bit_for_bit(tmp_path, algorithm):
    changes = {"server.weighting": "uniform"}  # DP-FedAvg's fixed weights 1/S
    plain = spec_with(None, algorithm, changes, rounds=4)
    private = spec_with({"clip": math.inf, "noise_multiplier": 0.0}, algorithm, changes, rounds=4)
    assert plain.spec_hash() != private.spec_hash()
    x_plain, m_plain = final_state(tmp_path, plain)
    x_private, m_private = final_state(tmp_path, private)
    assert torch.equal(x_plain, x_private)
    pd.testing.assert_frame_equal(m_plain, m_private, check_exact=True)


# -- adaptive clipping, resume, populations ----------------------------------------------------------------------


def test_adaptive_clip_follows_the_geometric_update():
    """C ← C·exp(−η_C(b̃ − γ)) with b̃ = (Σ(b_i − ½) + N(0, σ_b²))/S + ½ (Andrew et al. 2021, Alg. 1)."""
    a = {"quantile": 0.3, "lr": 0.2, "count_noise": 0.8}
    plugin = DPFedAvg(spec_with({"clip": 1.0, "noise_multiplier": 0.5, "adaptive_clip": a}), 4, None)
    norms = torch.tensor([0.2, 0.9, 1.0, 1.5, 3.0])
    rows = torch.diag(norms)  # row i has norm norms[i]
    clip = 1.0
    for t in range(1, 4):
        served(plugin, rows, t)
        unclipped = int((norms <= clip).sum())
        noisy = (unclipped - S / 2 + numpy_stream(4, "privacy_count", t).normal(0.0, 0.8)) / S + 0.5
        clip *= math.exp(-0.2 * (noisy - 0.3))
        assert plugin.clip == pytest.approx(clip, rel=1e-12), t
        assert plugin.round_logs(t)["clipped"] == S - unclipped


def test_adaptive_clip_settles_at_the_target_quantile():
    """Without count noise, C converges to where a fraction γ of the norms lies below it."""
    a = {"quantile": 0.5, "lr": 0.2, "count_noise": 0.0}
    plugin = DPFedAvg(spec_with({"clip": 0.01, "noise_multiplier": 0.0, "adaptive_clip": a}), 0, None)
    norms = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    for t in range(1, 200):
        served(plugin, torch.diag(norms), t)
    assert 2.5 < plugin.clip < 3.5  # oscillates around the median norm 3


def test_a_private_run_resumes_exactly(tmp_path):
    privacy = {"clip": 0.3, "noise_multiplier": 0.8, "adaptive_clip": {"count_noise": 1.0}}
    spec = spec_with(privacy, rounds=5, checkpoint_every=2)
    whole, whole_out = train(tmp_path, spec, "whole")

    def stop(t, metrics):
        assert "epsilon" in metrics  # each round's ε goes to the progress callback
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, spec, "resumed", on_round=stop)
    resumed, out = train(tmp_path, spec, "resumed")
    pd.testing.assert_frame_equal(
        whole.metrics([whole_out.run_id])[COLS], resumed.metrics([out.run_id])[COLS], check_exact=True
    )
    keys = ("epsilon", "clip", "noise_std", "clipped")
    want = [{k: e[k] for k in keys} for e in logs(whole, whole_out.run_id)]
    assert [{k: e[k] for k in keys} for e in logs(resumed, out.run_id)] == want


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_private_runs_train_in_a_population_as_each_alone(tmp_path):
    """The plug-in works on each run's own rows, server side, with its own noise stream and accountant."""
    from fedbench.engine.population import PopulationRun, execute_population, population_key
    from tests.engine.test_population import alone, assert_same

    local = {"iterations": 3, "batch_size": 16, "lr": 0.1, "precision": "fp64"}
    a = spec_with(DP, local=local)
    b = spec_with({"clip": 0.2, "noise_multiplier": 0.4, "adaptive_clip": {}}, local=local)  # z < 2·S/20
    plain = spec_with(None, local=local)
    assert population_key(a) == population_key(b) == population_key(plain) is not None
    runs = [PopulationRun(a, 0, "h"), PopulationRun(b, 1, "h"), PopulationRun(plain, 2, "h")]
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3"))
    alone_store, alone_outs = alone(tmp_path, runs, cache)
    assert_same(store, outs, alone_store, alone_outs)
    for p, q in zip(outs[:2], alone_outs[:2]):
        assert [e["epsilon"] for e in logs(store, p.run_id)] == [e["epsilon"] for e in logs(alone_store, q.run_id)]


# -- the example, the table, the catalogue, bad input ------------------------------------------------------------


def test_the_example_runs_at_the_tiny_scale_and_its_table_has_an_epsilon_column(tmp_path):
    """configs/examples/privacy.yaml (FedAvg, DP-FedAvg at z = 0.5 and 1, adaptive clipping), tiny scale."""
    from pathlib import Path

    from fedbench import api
    from fedbench.report.tables import format_table, summarize

    path = Path(__file__).parents[1] / "configs" / "examples" / "privacy.yaml"
    api.run(path, tmp_path / "out", scale="tiny")
    store = ResultsStore(tmp_path / "out")
    assert set(store.runs()["status"]) == {"finished"} and len(store.runs()) == 4
    summary = summarize(store.runs(), store.metrics()).set_index("algorithm")
    assert pd.isna(summary.loc["FedAvg", "epsilon"])
    assert summary.loc["DP-FedAvg z=1", "epsilon"] < summary.loc["DP-FedAvg z=0.5", "epsilon"]  # more noise, less ε
    assert summary.loc["DP-FedAvg adaptive", "epsilon"] == pytest.approx(summary.loc["DP-FedAvg z=1", "epsilon"])
    table = format_table(summary.reset_index(), "markdown")
    assert "| ε" in table or " ε |" in table
    assert r"$\varepsilon$" in format_table(summary.reset_index(), "latex")


def test_fedbench_list_shows_the_privacy_keys_and_algorithms():
    from fedbench.algorithms import ALGORITHMS
    from fedbench.catalog import catalog
    from fedbench.scenario.schema import PrivacySpec

    rows = catalog()["privacy"][1:]
    assert [r[0] for r in rows[:-1]] == [f"privacy.{k}" for k in PrivacySpec.model_fields]
    takes = {e.name for e in ALGORITHMS if e.obj.caps.client_dp}
    assert {"fedavg", "fedadam", "fedprox"} <= takes and "scaffold" not in takes and "gradma" not in takes
    algos = {row[0]: row for row in catalog()["algorithms"][1:]}
    assert algos["fedavg"][6] == "yes" and algos["scaffold"][6] == "—"


def test_absent_privacy_keeps_the_hash_and_an_entry_may_turn_it_off():
    plain = spec_with(None)
    raw = tiny_scenario({"clients.num": N, "clients.per_round": S}, privacy=DP)
    raw["algorithms"] = [{"name": "fedavg"}, {"name": "fedavg", "label": "off", "privacy": False}]
    on, off = resolve_runs(parse_scenario(raw))
    assert on.privacy is not None and on.privacy.clip == DP["clip"] and off.privacy is None
    assert "privacy" not in json.loads(plain.to_json()) and off.spec_hash() != on.spec_hash()
    # resolution fills the defaults in: δ = 1/N^1.1, σ_b = S/20; C = ∞ survives the spec's JSON
    adaptive = spec_with({"clip": 1.0, "noise_multiplier": 0.1, "adaptive_clip": {}}).privacy
    assert adaptive.delta == 1 / N**1.1 and adaptive.adaptive_clip.count_noise == S / 20
    infinite = spec_with({"clip": math.inf, "noise_multiplier": 0.0})
    assert type(infinite).model_validate(json.loads(infinite.to_json())).privacy.clip == math.inf


BAD = [
    ({"clip": 0, "noise_multiplier": 1.0}, {}, "privacy.clip: Input should be greater than 0"),
    ({"clip": 1.0, "noise_multiplier": -1.0}, {}, "privacy.noise_multiplier: Input should be greater than or equal"),
    ({"clip": 1.0}, {}, "privacy.noise_multiplier: Field required"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "sigma": 1}, {}, "privacy.sigma: unknown key"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "delta": 1.5}, {}, "privacy.delta: Input should be less than 1"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "accountant": "moments"}, {}, "privacy.accountant"),
    ({"clip": math.inf, "noise_multiplier": 1.0, "adaptive_clip": {}}, {}, "adaptive_clip needs a finite clip"),
    ({**DP, "adaptive_clip": {"quantile": 1.5}}, {}, "privacy.adaptive_clip.quantile"),
    ({**DP, "adaptive_clip": {"count_noise": 0.5}}, {}, "privacy.adaptive_clip.count_noise: σ_b = 0.5 leaves no noise"),
    (DP, {"algorithm": "scaffold"}, "privacy: scaffold does not upload a model delta"),
    (
        DP,
        {"changes": {"clients.availability": {"kind": "bernoulli", "p": 0.5}}},
        "privacy: not supported with clients.",
    ),
    (DP, {"top": {"wireless": {}}}, "privacy: not supported with wireless"),
]


@pytest.mark.parametrize("privacy, where, needle", BAD)
def test_bad_privacy_names_its_key(privacy, where, needle):
    raw = tiny_scenario({"clients.num": N, "clients.per_round": S, **where.get("changes", {})}, **where.get("top", {}))
    raw["privacy"] = privacy
    raw["algorithms"] = [{"name": where.get("algorithm", "fedavg")}]
    with pytest.raises(ScenarioError) as err:
        resolve_runs(parse_scenario(raw))
    assert needle in str(err.value), str(err.value)
    assert str(err.value).count("\n") == 0  # one line


def test_an_entry_block_names_its_entry():
    raw = tiny_scenario()
    raw["algorithms"] = [{"name": "fedavg"}, {"name": "gradma", "privacy": DP}]
    with pytest.raises(ScenarioError, match=r"algorithms\[1\]\.privacy: gradma does not upload"):
        resolve_runs(parse_scenario(raw))


def test_privacy_without_opacus_is_a_one_line_error(monkeypatch):
    import importlib.util

    import fedbench.scenario.resolve as resolve

    real = importlib.util.find_spec
    monkeypatch.setattr(resolve.importlib.util, "find_spec", lambda name: None if name == "opacus" else real(name))
    with pytest.raises(
        ScenarioError, match=r"privacy: needs opacus, the accountant \(pip install 'fedbench\[privacy\]'\)"
    ):
        resolve_runs(parse_scenario(tiny_scenario(privacy=DP)))


def test_the_cli_rejects_bad_privacy_with_exit_2_and_writes_nothing(tmp_path):
    from fedbench.cli import app

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(privacy={"clip": -1.0, "noise_multiplier": 1.0})))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)], terminal_width=300)
    assert result.exit_code == 2 and "privacy.clip: Input should be greater than 0" in result.output, result.output
    assert "Traceback" not in result.output and not out.exists()


def test_a_model_with_batchnorm_buffers_is_refused_by_the_plug_in(tmp_path):
    """BatchNorm's running statistics would travel to the server unclipped and unnoised."""
    from tests.engine.test_batched import ImageCache

    spec = spec_with(DP, model={"name": "lenet5_bn"})
    setup = build_run(spec, 0, ImageCache(tmp_path, (1, 16, 16)))
    assert setup.model.buffer_numel() > 0
    with pytest.raises(ValueError, match="privacy: model lenet5_bn has BatchNorm buffers"):
        DPFedAvg(spec, 0, setup)
