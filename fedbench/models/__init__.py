"""Model registry and definitions; importing this package registers every model."""

from fedbench.models import cnn, convmixer, leaf_models, mlp, paper_models, resnet, resnet_cifar  # noqa: F401  (registration side effects)
from fedbench.models.registry import MODELS, build_model, count_parameters

__all__ = ["MODELS", "build_model", "count_parameters"]
