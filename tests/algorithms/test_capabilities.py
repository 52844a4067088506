"""Each algorithm declares its capabilities once, at registration; catalogue, validator and engine read them."""

import pytest

from fedbench.algorithms import ALGORITHMS, Algorithm
from fedbench.algorithms.base import AlgorithmRegistry
from fedbench.algorithms.capabilities import Capabilities
from fedbench.catalog import catalog


def test_every_registered_class_carries_its_own_declaration():
    seen = set()
    for entry in ALGORITHMS:
        assert isinstance(entry.obj.caps, Capabilities) and entry.obj.caps.label
        assert id(entry.obj) not in seen, f"{entry.name} shares its class with another entry"
        seen.add(id(entry.obj))
    assert ALGORITHMS.capabilities("cflag").inputs == ("full_grad", "memory_grad")
    assert ALGORITHMS.capabilities("nccl_fl").replay_apart and not ALGORITHMS.capabilities("fedavg").replay_per_step
    assert ALGORITHMS.capabilities("fedqvr_e").inputs == ("bits",) and not ALGORITHMS.capabilities("fedqvr").inputs
    assert set(ALGORITHMS.capabilities("gradma").diagnostics) == {"qp_fallbacks"}


def test_registration_rejects_a_second_registration_and_unknown_or_inconsistent_capabilities():
    registry = AlgorithmRegistry("algorithm")
    cls = type("Probe", (Algorithm,), {})
    registry.register("probe", "test", label="Probe")(cls)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("probe2", "test", label="Probe")(cls)
    with pytest.raises(TypeError, match="full_gradients"):
        registry.register("probe3", "test", label="P", full_gradients=True)
    with pytest.raises(ValueError, match="replay_apart needs replay_per_step"):
        registry.register("probe4", "test", label="P", replay_apart=True)
    with pytest.raises(ValueError, match=r"unknown engine input\(s\) \['hessian'\]; known: full_grad"):
        registry.register("probe5", "test", label="P", inputs=("hessian",))


def test_params_are_declared_once_by_the_registry_and_annotations_agree():
    """``Params = X`` class attributes are gone: the registry's argument is the parameters' type, and
    a class's ``params`` annotation (for the type checker) names that type or a base of it."""
    import typing

    for entry in ALGORITHMS:
        assert "Params" not in vars(entry.obj), entry.name
        hint = typing.get_type_hints(entry.obj).get("params")
        assert hint is None or issubclass(entry.params, hint), (entry.name, hint, entry.params)


def test_the_catalogue_shows_the_declared_label_server_defaults_and_compression():
    rows = {row[0]: row for row in catalog()["algorithms"][1:]}
    assert rows["fedadam"][1] == "FedAdam" and "adam" in rows["fedadam"][4] and rows["fedadam"][5] == "yes"
    assert rows["scaffold"][4] == "—" and rows["scaffold"][5] == "—"
