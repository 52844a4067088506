"""The servers of a population's runs updated as one vmapped call (fedbench/engine/population_server.py): runs
of one shape with their own seeds, η_g and η_l give the numbers each has alone (float64 to 1e-10, and float32
bit for bit on this CPU), with and without bias correction, every round goes through the joint call, client tables
live in one storage stacked once and checkpoint as each run's own, and the runs it must leave out (another shape,
an algorithm without ``vmap_server``, tables in host memory) are updated alone with the same numbers."""

from types import SimpleNamespace

import pytest
import torch

import fedbench.engine.population_server as population_server
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.client_table import DeviceTable
from fedbench.algorithms.state import state_leaves
from fedbench.engine.population import PopulationRun, execute_population
from fedbench.engine.setup import DataCache, build_run
from fedbench.models.flat import average_buffers
from fedbench.optim.server import ServerOptimizer
from fedbench.optim.spec import ServerSpec
from fedbench.options import RunOptions
from fedbench.store import ResultsStore
from tests.engine.test_batched import with_algorithm
from tests.engine.test_population import LOCAL, PLAIN_SERVER, alone, assert_same, spec_of
from tests.factories import tiny_scenario

VMAP_SERVER = [n for n in ALGORITHMS.names() if ALGORITHMS.capabilities(n).vmap_server]
RATES = [(1.0, 0.05), (0.7, 0.03), (0.3, 0.05)]  # (η_g, η_l) of the three runs


@pytest.fixture
def joint_calls(monkeypatch):
    """How many runs each vmapped server update took, call by call."""
    calls: list[int] = []
    original = population_server.joint_update

    def counting(loops, received, flat):
        calls.append(len(loops))
        return original(loops, received, flat)

    monkeypatch.setattr(population_server, "joint_update", counting)
    return calls


def one_shape(name, server=None, local=LOCAL, rounds=3):
    """Three runs of one shape (N = 8, S = 3): seeds 0, 1, 2 with the η_g and η_l of ``RATES`` (the first η_l
    for an algorithm without ``row_lr``)."""
    runs = []
    for seed, (server_lr, lr) in enumerate(RATES):
        server_lr = 1.0 if name in PLAIN_SERVER else server_lr  # FedQVR's server has no optimizer of its own
        lr = lr if ALGORITHMS.capabilities(name).row_lr else RATES[0][1]  # one η_l a population (NCCL-FL)
        changes = {"clients.num": 8, "clients.per_round": 3, "server.lr": server_lr, **(server or {})}
        raw = with_algorithm(tiny_scenario(changes, local={**local, "lr": lr}, rounds=rounds), name)
        runs.append(PopulationRun(spec_of(raw), seed, "h"))
    return runs


def train_both(tmp_path, runs):
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population=str(len(runs))))
    assert [o.status for o in outs] == ["finished"] * len(runs)
    return store, outs, *alone(tmp_path, runs, cache)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", VMAP_SERVER)
def test_runs_of_one_shape_share_one_server_update(tmp_path, joint_calls, name):
    store, outs, alone_store, alone_outs = train_both(tmp_path, one_shape(name))
    assert_same(store, outs, alone_store, alone_outs)
    assert joint_calls == [3, 3, 3]  # every round, all three runs in one call


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedams"])
def test_bias_corrected_servers_share_one_update(tmp_path, joint_calls, name):
    """β^t of the runs as one vectorised power (the FedCAMS paper's configs correct their moments' bias)."""
    store, outs, alone_store, alone_outs = train_both(tmp_path, one_shape(name, {"server.bias_correction": True}))
    assert_same(store, outs, alone_store, alone_outs)
    assert joint_calls == [3, 3, 3]


@pytest.mark.parametrize(
    ("name", "server"),
    [("fedavgm", None), ("fedadam", None), ("fedcm", None), ("fedadam", {"server.bias_correction": True})],
)
def test_float32_is_bit_for_bit(tmp_path, joint_calls, name, server):
    local = {**LOCAL, "precision": "fp32"}
    store, outs, alone_store, alone_outs = train_both(tmp_path, one_shape(name, server, local=local))
    for p, a in zip(outs, alone_outs):
        got, want = store.metrics([p.run_id]), alone_store.metrics([a.run_id])
        assert got["train_loss"].tolist() == want["train_loss"].tolist()
        assert got["test_loss"].dropna().tolist() == want["test_loss"].dropna().tolist()
    assert joint_calls == [3, 3, 3]


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["gradma_s", "gradma"])
def test_runs_it_cannot_join_are_updated_alone(tmp_path, joint_calls, name):
    store, outs, alone_store, alone_outs = train_both(tmp_path, one_shape(name))
    assert_same(store, outs, alone_store, alone_outs)
    assert joint_calls == []


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_runs_whose_client_tables_are_in_host_memory_are_updated_alone(tmp_path, joint_calls):
    runs = one_shape("scaffold")
    cache = DataCache(tmp_path, False, torch.device("cpu"))
    store = ResultsStore(tmp_path / "pop")
    outs = execute_population(runs, store, cache, RunOptions(population="3", client_state="host"))
    assert [o.status for o in outs] == ["finished"] * 3 and joint_calls == []
    assert_same(store, outs, *alone(tmp_path, runs, cache))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_client_tables_are_stacked_once_and_checkpoint_as_each_runs_own(tmp_path, monkeypatch):
    """SCAFFOLD's c_i of three runs: one [3, N, P] storage from the first round on (not a copy a round), and a
    run's checkpointed table is its own [N, P] rows, not the population's storage."""
    storages: list[int] = []
    original = population_server.stacked_tables

    def recording(tables):
        stacked = original(tables)
        storages.append(stacked.untyped_storage().data_ptr())
        return stacked

    monkeypatch.setattr(population_server, "stacked_tables", recording)
    saved: list[list] = []
    import fedbench.engine.runner as runner

    flatten = runner.flatten_state
    monkeypatch.setattr(runner, "flatten_state", lambda state: saved.append(flatten(state)) or saved[-1])
    runs = [
        PopulationRun(r.spec.model_copy(update={"checkpoint_every": 1}), r.seed, "h") for r in one_shape("scaffold")
    ]
    store, outs, alone_store, alone_outs = train_both(tmp_path, runs)
    assert_same(store, outs, alone_store, alone_outs)
    assert len(storages) == 3 and len(set(storages)) == 1
    tables = [leaf for leaves in saved for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.dim() == 2]
    assert tables and all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in tables)


def test_runs_of_another_shape_make_their_own_group(tmp_path, joint_calls):
    runs = one_shape("fedavgm")
    other = with_algorithm(tiny_scenario({"clients.num": 8, "clients.per_round": 4}, local=LOCAL), "fedavgm")
    runs.append(PopulationRun(spec_of(other), 3, "h"))
    store, outs, alone_store, alone_outs = train_both(tmp_path, runs)
    assert_same(store, outs, alone_store, alone_outs)
    assert joint_calls == [3, 3, 3]  # S = 4 is updated alone


@pytest.mark.parametrize("name", VMAP_SERVER)
def test_a_vmapped_servers_state_is_tensors_and_device_tables(tmp_path, name):
    spec = spec_of(with_algorithm(tiny_scenario(local=LOCAL), name))
    run = build_run(spec, 0, DataCache(tmp_path, False, torch.device("cpu")))
    state = run.algorithm.init_state(run.x0)
    assert all(isinstance(v, torch.Tensor | DeviceTable) for v in state_leaves(state))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "yogi", "amsgrad", "ams"])
def test_a_server_at_a_tensor_rate_steps_as_at_its_own(optimizer):
    spec = ServerSpec(optimizer=optimizer, lr=0.3, momentum=0.5 if optimizer == "sgd" else 0.0)
    server = ServerOptimizer(spec)
    x, delta = torch.linspace(-1, 1, 7, dtype=torch.float64), torch.linspace(0.5, -0.2, 7, dtype=torch.float64)
    state = server.init(x)
    want, _ = server.step(x, delta, state)
    got, _ = server.at_rate(torch.tensor(0.3, dtype=torch.float64)).step(x, delta, state)
    assert torch.equal(got, want) and server.lr == 0.3


def received_buffers(k, seed, counter=3):
    """A run's received BatchNorm buffers of k clients (two float buffers and an integer counter) and weights."""
    g = torch.Generator().manual_seed(seed)
    buffers = [
        {
            "bn.running_mean": torch.randn(4, generator=g, dtype=torch.float64),
            "bn.running_var": torch.rand(2, 3, generator=g, dtype=torch.float64),
            "bn.num_batches_tracked": torch.tensor(counter + i),
        }
        for i in range(k)
    ]
    weights = torch.rand(k, generator=g, dtype=torch.float64)
    return SimpleNamespace(buffers=buffers, buffer_weights=weights / weights.sum())


def test_buffers_averaged_together_are_each_runs_own_average():
    """Runs with as many received clients average their buffers together (float: weighted, to 1e-14; the
    counter: the maximum, exactly); a run with another count, a run with nothing received and one without
    buffers are left to average alone."""
    received = [received_buffers(3, 0), received_buffers(4, 1), None, received_buffers(3, 2, counter=9)]
    received += [SimpleNamespace(buffers=[{}, {}], buffer_weights=torch.ones(2) / 2), received_buffers(3, 3)]
    joint = population_server.joint_buffers(received)
    assert sorted(joint) == [0, 3, 5]
    for i in joint:
        want = average_buffers(received[i].buffers, received[i].buffer_weights)
        assert joint[i].keys() == want.keys()
        for name, value in want.items():
            assert joint[i][name].dtype == value.dtype and joint[i][name].shape == value.shape
            torch.testing.assert_close(joint[i][name], value, rtol=1e-14, atol=0)
    assert int(joint[3]["bn.num_batches_tracked"]) == 11


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", ["gradma", "gradma_s"])
def test_gradma_trials_project_their_server_momenta_together(tmp_path, monkeypatch, name):
    """GradMA's trials of one seed (other β1, β2, η_g and η_l) and a run of another seed: every round the class's
    server_updates gets all three, the two trials' QP_g (as many live constraints) is one projection of two rows,
    and each run has the numbers it has alone (float64, 1e-10)."""
    import fedbench.algorithms.gradma as gradma

    rows, calls, server = [], [], [False]  # rows of each QP_g projection; runs of each joint call
    solve, memories, joint = gradma.solve, gradma.project_memories, population_server.joint_server_updates

    def projecting(p, M, blocks):
        if server[0]:
            rows.append(len(p))
        return solve(p, M, blocks)

    def server_side(items):
        server[0] = True
        try:
            return memories(items)
        finally:
            server[0] = False

    monkeypatch.setattr(gradma, "solve", projecting)
    monkeypatch.setattr(gradma, "project_memories", server_side)
    monkeypatch.setattr(
        population_server, "joint_server_updates", lambda loops, got: calls.append(len(loops)) or joint(loops, got)
    )
    runs = []
    for seed, (beta, (server_lr, lr)) in zip([0, 0, 1], zip([0.5, 0.9, 0.5], RATES)):
        changes = {"clients.num": 8, "clients.per_round": 3, "server.lr": server_lr}
        raw = with_algorithm(tiny_scenario(changes, local={**LOCAL, "lr": lr}, rounds=3), name)
        raw["algorithms"][0].update({"beta1": beta, "beta2": 1.4 - beta, "memory_size": 8})
        runs.append(PopulationRun(spec_of(raw), seed, "h"))
    store, outs, alone_store, alone_outs = train_both(tmp_path, runs)
    assert_same(store, outs, alone_store, alone_outs)
    together, alone_rows = rows[: len(rows) - 9], rows[len(rows) - 9 :]  # alone: one row a run and round
    assert calls == [3, 3, 3] and alone_rows == [1] * 9
    assert sum(together) == 9 and len(together) <= 6, together  # each round, the trials' rows in one projection
