"""The activations a `bert_config.json` may name, written out so their math is visible.

The original's "gelu" is the tanh approximation; Hugging Face's "gelu" is the exact erf form, which
is called "gelu_exact" here (SPEC.md section 2). Loaders translate between the two vocabularies.
"""
import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert")
def gelu(x):
    """The original BERT's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cdf = 0.5 * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * ops.power(x, 3))))
    return x * cdf


@keras.saving.register_keras_serializable(package="bert")
def gelu_exact(x):
    """The exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), as Hugging Face's "gelu"."""
    return 0.5 * x * (1.0 + ops.erf(x / math.sqrt(2.0)))


_BY_NAME = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "relu": ops.relu,
    "tanh": ops.tanh,
    "linear": None,
}
NAMES = frozenset(_BY_NAME)


def get(name: str):
    """The activation function for a config's `hidden_act` (None for "linear")."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown hidden_act {name!r}; supported: {', '.join(sorted(NAMES))}")
