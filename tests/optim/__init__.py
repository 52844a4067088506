import torch


def named(state) -> dict[str, torch.Tensor]:
    """A transform chain's typed state as {field: tensor} (every transform's fields, nested chains
    included): the names the frozen implementation keeps in its dict."""
    out: dict[str, torch.Tensor] = {}

    def walk(node) -> None:
        if hasattr(node, "_fields"):
            for name in node._fields:
                value = getattr(node, name)
                if isinstance(value, torch.Tensor):
                    assert name not in out, f"two transforms keep {name!r}"
                    out[name] = value
                else:
                    walk(value)
        elif isinstance(node, tuple):
            for child in node:
                walk(child)

    walk(state)
    return out


def snapshot(state) -> dict[str, torch.Tensor]:
    """Clones of a state's tensors, to check that an update left the state it was given alone."""
    return {k: v.clone() for k, v in named(state).items()}


def unchanged(state, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(named(state)[k], v) for k, v in before.items())
