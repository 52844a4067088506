"""Strict values (fedbench/strict.py, issue 24 item 8): no string, float or integer is turned into a number
or a boolean by pydantic's lax mode, in the scenario's blocks and in components' parameters alike; YAML lists
still fill tuples, integers still fill floats, ``--set`` values and ``1e-3`` are numbers as YAML reads them."""

import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.report.bits import parse_compressor
from fedbench.scenario import ScenarioError, load_scenario, parse_scenario
from fedbench.sweeps.grid import read_grid
from tests.factories import tiny_scenario

runner = CliRunner()


def problems(raw: dict) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    return err.value.problems


@pytest.mark.parametrize(
    "changes, algorithm, needle",
    [  # the 13 lax cases the outside corpus found
        ({"rounds": "3"}, "fedavg", "rounds: Input should be a valid integer, got '3' (a string; values are strict)"),
        ({"rounds": 3.0}, "fedavg", "rounds: Input should be a valid integer, got 3.0 (a float; values are strict)"),
        ({"local.lr": "0.05"}, "fedavg", "local.lr: Input should be a valid number, got '0.05' (a string"),
        ({"clients.num": "10"}, "fedavg", "clients.num: Input should be a valid integer, got '10'"),
        ({}, {"name": "fedprox", "mu": "0.1"}, "algorithms[0].mu: Input should be a valid number, got '0.1'"),
        ({"eval.client_spread": "yes"}, "fedavg", "eval.client_spread: Input should be a valid boolean, got 'yes'"),
        ({"eval.client_spread": 1}, "fedavg", "eval.client_spread: Input should be a valid boolean, got 1 (an integer"),
        ({"local.iterations": 2.0}, "fedavg", "local.iterations: Input should be a valid integer, got 2.0"),
        ({"partition.omega": "0.5"}, "fedavg", "partition.omega: Input should be a valid number, got '0.5'"),
        (
            {"compression": {"kind": "topk", "ratio": "0.5"}},
            "fedcams",
            "compression.ratio: Input should be a valid number",
        ),
        (
            {"compression": {"kind": "stochastic", "bits": 4.0}},
            "fedcams",
            "compression.bits: Input should be a valid integer, got 4.0",
        ),
        (
            {"local.betas": [0.9, "0.99"], "local.optimizer": "adam"},
            "fedavg",
            "local.betas[1]: Input should be a valid number",
        ),
        ({"seeds": ["1"]}, "fedavg", "seeds[0]: Input should be a valid integer, got '1'"),
        ({"model.hidden": ["16"]}, "fedavg", "model.hidden[0]: Input should be a valid integer, got '16'"),
        ({"dataset.test_fraction": "0.2"}, "fedavg", "dataset.test_fraction: Input should be a valid number"),
    ],
)
def test_lax_values_are_refused_naming_their_key(changes, algorithm, needle):
    entry = algorithm if isinstance(algorithm, dict) else {"name": algorithm}
    found = problems(tiny_scenario(changes, algorithms=[entry]))
    assert any(p.startswith(needle) for p in found), found


def test_lists_fill_tuples_and_integers_fill_floats_with_unchanged_hashes():
    sc = parse_scenario(
        tiny_scenario({"local.lr": 1, "local.optimizer": "adam", "local.betas": [0.9, 0.99], "partition.omega": 1})
    )
    assert sc.local.betas == (0.9, 0.99) and sc.local.lr == 1.0 and isinstance(sc.local.lr, float)
    same = parse_scenario(
        tiny_scenario({"local.lr": 1.0, "local.optimizer": "adam", "local.betas": (0.9, 0.99), "partition.omega": 1.0})
    )
    assert sc.runs[0].spec_hash() == same.runs[0].spec_hash()
    random = parse_scenario(tiny_scenario(local={"random_epochs": [1, 3], "batch_size": 8, "lr": 0.1}))
    assert random.local.random_epochs == (1, 3)


def test_yaml_exponents_and_set_overrides_are_numbers(tmp_path):
    text = yaml.safe_dump(tiny_scenario()).replace("lr: 0.1", "lr: 1e-3")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert load_scenario(path).local.lr == 0.001
    sc = load_scenario(path, ["rounds=5", "local.lr=2.5e-2", "partition.omega=1", "eval.client_spread=false"])
    assert (sc.rounds, sc.local.lr, sc.eval.client_spread) == (5, 0.025, False)
    with pytest.raises(ScenarioError, match=r"rounds: Input should be a valid integer, got '5'"):
        load_scenario(path, ["rounds='5'"])


def test_a_grid_file_is_strict(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(tiny_scenario()))
    grid = tmp_path / "grid.yaml"
    grid.write_text("base: base.yaml\nseeds: ['0', 1]\n")
    with pytest.raises(ScenarioError, match="seeds.0: Input should be a valid integer"):
        read_grid(grid)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("topk:ratio=7", "--compressor topk:ratio=7: ratio: Input should be less than or equal to 1, got 7"),
        ("stochastic:bits=2.5", "--compressor stochastic:bits=2.5: bits: Input should be a valid integer, got 2.5"),
        ("topk:ratio=a/b", "--compressor topk:ratio=a/b: ratio: expected a number or a fraction like 1/64, got 'a/b'"),
        ("topk:=3", "--compressor topk:=3: expected KIND:KEY=VALUE"),
    ],
)
def test_bits_compressor_parameters_are_checked_like_a_scenario(text, needle):
    with pytest.raises(ValueError) as err:
        parse_compressor(text)
    assert str(err.value).startswith(needle) and "\n" not in str(err.value) and "http" not in str(err.value)
    assert parse_compressor("topk:ratio=1/64") == ("topk", {"ratio": 1 / 64})
    assert parse_compressor("stochastic:bits=2") == ("stochastic", {"bits": 2})


def test_bits_command_prints_one_line_without_pydantic_text(tmp_path):
    result = runner.invoke(
        app,
        ["bits", "mlp", "--input", "1x8x8", "--compressor", "topk:ratio=7", "--tables-dir", str(tmp_path / "t")],
        terminal_width=300,
    )
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "--compressor topk:ratio=7: ratio: Input should be less than or equal to 1, got 7"
    ]
    assert not (tmp_path / "t").exists()
