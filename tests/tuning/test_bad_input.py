"""Bad tune blocks: one line naming the YAML path and the value, exit 2, before anything trains."""

import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.scenario import ScenarioError, parse_scenario
from tests.factories import tiny_scenario

GOOD = {"space": {"local.lr": [0.01, 0.1]}}
CASES = {
    "unknown key": ({"space": {"lrate": [0.1]}}, "tune.space.lrate: algorithms[0] (fedavg) cannot take 'lrate'"),
    "unknown local key": ({"space": {"local.lrate": [0.1]}}, "tune.space.local.lrate: local has no key 'lrate'"),
    "unknown server key": ({"space": {"server.gamma": [0.1]}}, "tune.space.server.gamma: server has no key 'gamma'"),
    "a key the entry cannot take": ({"space": {"mu": [0.1]}}, "tune.space.mu: algorithms[0] (fedavg) cannot take 'mu'"),
    "empty list": ({"space": {"local.lr": []}}, "tune.space.local.lr: expected a non-empty list of values, got []"),
    "zero budget": ({**GOOD, "budget": 0}, "tune.budget: Input should be greater than or equal to 1, got 0"),
    "negative budget": ({**GOOD, "budget": -3}, "tune.budget: Input should be greater than or equal to 1, got -3"),
    "range without budget": (
        {"space": {"local.lr": {"uniform": [0.01, 0.1]}}},
        "tune: budget: a space with a range needs",
    ),
    "low > high": (
        {"space": {"local.lr": {"uniform": [0.1, 0.01]}}, "budget": 2},
        "tune.space.local.lr: uniform: low must be ≤ high, got [0.1, 0.01]",
    ),
    "log_uniform at 0": (
        {"space": {"local.lr": {"log_uniform": [0, 0.1]}}, "budget": 2},
        "tune.space.local.lr: log_uniform: bounds must be > 0, got [0.0, 0.1]",
    ),
    "log_uniform low > high": (
        {"space": {"server.lr": {"log_uniform": [10, 1]}}, "budget": 2},
        "tune.space.server.lr: log_uniform: low must be ≤ high, got [10.0, 1.0]",
    ),
    "empty choice": (
        {"space": {"local.lr": {"choice": []}}, "budget": 2},
        "tune.space.local.lr: choice: expected a non-empty list",
    ),
    "target above 1": (
        {**GOOD, "select": {"metric": "rounds_to", "target": 1.5}},
        "tune.select.target: must lie in (0, 1] (accuracy as a fraction), got 1.5",
    ),
    "target 0": (
        {**GOOD, "select": {"metric": "rounds_to", "target": 0}},
        "tune.select.target: must lie in (0, 1] (accuracy as a fraction), got 0",
    ),
    "a value the key refuses": (
        {"space": {"local.lr": [0.1, -1]}},
        "tune.space.local.lr: Input should be greater than 0, got -1",
    ),
    "a range bound the key refuses": (
        {"space": {"server.momentum": {"uniform": [0.5, 1.5]}}, "budget": 2},
        "tune.space.server.momentum: Input should be less than 1, got 1.5",
    ),
    "rounds_to without target": (
        {**GOOD, "select": {"metric": "rounds_to"}},
        "tune.select: metric rounds_to needs a target",
    ),
    "unknown protocol": ({**GOOD, "protocol": "holdout"}, "tune.protocol: Input should be 'validation' or 'paper'"),
    "unknown scheduler": (
        {**GOOD, "scheduler": "bayes"},
        "tune.scheduler: Input should be 'grid', 'random' or 'halving', got 'bayes'",
    ),
    "grid with a budget": ({**GOOD, "scheduler": "grid", "budget": 1}, "tune: scheduler: grid runs every point"),
    "grid with a range": (
        {"space": {"local.lr": {"uniform": [0.01, 0.1]}}, "budget": 2, "scheduler": "grid"},
        "tune: scheduler: grid runs every point of a grid of lists, got a range",
    ),
    "random without a budget": ({**GOOD, "scheduler": "random"}, "tune: scheduler: random draws budget"),
    "halving without its block": (
        {**GOOD, "scheduler": "halving"},
        "tune: halving: scheduler halving needs halving: {min_rounds: r0, eta: 3}",
    ),
    "a halving block without the scheduler": (
        {**GOOD, "halving": {"min_rounds": 1}},
        "tune: halving: given with scheduler absent; set scheduler: halving",
    ),
    "eta 1": (
        {**GOOD, "scheduler": "halving", "halving": {"min_rounds": 1, "eta": 1}},
        "tune.halving.eta: Input should be greater than or equal to 2, got 1",
    ),
    "min_rounds 0": (
        {**GOOD, "scheduler": "halving", "halving": {"min_rounds": 0}},
        "tune.halving.min_rounds: Input should be greater than or equal to 1, got 0",
    ),
    "min_rounds missing": (
        {**GOOD, "scheduler": "halving", "halving": {"eta": 2}},
        "tune.halving.min_rounds: Field required",
    ),
    "min_rounds above the trial rounds": (
        {**GOOD, "scheduler": "halving", "halving": {"min_rounds": 5}},
        "tune.halving.min_rounds: 5 exceeds the trial rounds (3)",
    ),
    "unknown halving key": (
        {**GOOD, "scheduler": "halving", "halving": {"min_rounds": 1, "rate": 2}},
        "tune.halving.rate: unknown key",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_tune_block_names_its_path_and_value(case):
    tune, line = CASES[case]
    with pytest.raises(ScenarioError) as err:
        parse_scenario(tiny_scenario(tune=tune))
    assert len(err.value.problems) == 1, err.value.problems
    assert err.value.problems[0].startswith(line), err.value.problems


def test_an_entry_block_names_the_entry():
    raw = tiny_scenario(algorithms=[{"name": "fedprox", "tune": {"space": {"beta": [0.1]}}}])
    with pytest.raises(
        ScenarioError, match=r"algorithms\[0\]\.tune\.space\.beta: algorithms\[0\] \(fedprox\) cannot take 'beta'"
    ):
        parse_scenario(raw)


@pytest.mark.parametrize(
    "entry, scenario, line",
    [
        ({"trials": {"rounds": 2}}, None, "algorithms[0].tune.space: Dictionary should have at least 1 item"),
        (
            {"space": {"local.lr": {"uniform": [0.01, 0.1]}}},
            GOOD,
            "algorithms[0].tune: budget: a space with a range needs",
        ),
        (True, None, "algorithms[0].tune: Input should be a valid dictionary or instance of EntryTune, got True"),
        ({"budget": 0}, GOOD, "algorithms[0].tune.budget: Input should be greater than or equal to 1, got 0"),
    ],
)
def test_an_entry_block_laid_over_the_scenario_must_still_run(entry, scenario, line):
    """A block alone needs a space; a merged space with a range needs a budget; ``true`` is no block."""
    raw = tiny_scenario(tune=scenario, algorithms=[{"name": "fedavg", "tune": entry}])
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert any(p.startswith(line) for p in err.value.problems), err.value.problems


def test_a_scale_overlay_can_switch_tuning_off():
    """``tune: false`` in a scale turns it off, and an inherited ``tune.budget`` overlay is ignored there."""
    from fedbench.scenario.files import apply_scale

    raw = tiny_scenario(tune=GOOD)
    raw["scales"] = {"tiny": {"tune": False, "tune.budget": 3}, "small": {"tune.budget": 1}}
    assert not parse_scenario(apply_scale(raw, "tiny")).tuned
    assert parse_scenario(apply_scale(raw, "small")).tune.budget == 1


def test_a_continual_scenario_cannot_be_tuned_yet():
    raw = tiny_scenario(tune=GOOD, continual={"tasks": 2, "rounds_per_task": 2}, rounds=4)
    with pytest.raises(ScenarioError, match="tune: tuning a continual scenario is not supported yet"):
        parse_scenario(raw)


BAD_CLI = {
    "range": (
        {"space": {"local.lr": {"uniform": [0.1, 0.01]}}, "budget": 2},
        "tune.space.local.lr: uniform: low must be ≤ high, got [0.1, 0.01]",
    ),
    "halving": (
        {**GOOD, "scheduler": "halving", "halving": {"min_rounds": 1, "eta": 1}},
        "tune.halving.eta: Input should be greater than or equal to 2, got 1",
    ),
}


@pytest.mark.parametrize("bad", sorted(BAD_CLI))
@pytest.mark.parametrize("command", ["tune", "validate"])
def test_the_commands_exit_2_before_training(tmp_path, command, bad):
    tune, line = BAD_CLI[bad]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(tune=tune)))
    args = [command, str(path)] + (["--out", str(tmp_path / "out")] if command == "tune" else [])
    result = CliRunner().invoke(app, args, terminal_width=250)
    assert result.exit_code == 2
    assert line in result.output
    assert not (tmp_path / "out").exists()
