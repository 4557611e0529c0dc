"""An independent NumPy BERT, written from SPEC.md sections 2-3 only, in float64.

It shares no code with `modeling`: it reads weights by their TF1 names from a plain dict and does
the math with NumPy. Tests compare the Keras model against it.
"""
import math

import numpy as np


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _erf(x):
    # math.erf is exact to double precision; vectorise it.
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu_exact(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


ACTIVATIONS = {"gelu": gelu_tanh, "gelu_exact": gelu_exact,
               "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "linear": lambda x: x}


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class ReferenceBert:
    """Forward pass of the original BERT; `w` maps TF1 variable names to arrays."""

    def __init__(self, weights, num_layers, num_heads, hidden_act="gelu", eps=1e-12,
                 pre_layer_norm=False, gated=False):
        """`pre_layer_norm` and `gated` are Cramming's changes, not the original's: LayerNorm on
        each sublayer's input plus `bert/encoder/LayerNorm` at the end; a feed-forward of
        act(gate) * value, the intermediate kernel's columns [value | gate]. A dense layer with no
        `/bias` in `weights` has none."""
        self.w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.act = ACTIVATIONS[hidden_act]
        self.eps = eps
        self.pre_layer_norm = pre_layer_norm
        self.gated = gated

    def dense(self, x, scope):
        return x @ self.w[scope + "/kernel"] + self.w.get(scope + "/bias", 0.0)

    def feed_forward(self, x, p):
        inner = self.dense(x, p + "/intermediate/dense")
        if self.gated:
            half = inner.shape[-1] // 2
            inner = inner[..., :half] * self.act(inner[..., half:])
        else:
            inner = self.act(inner)
        return self.dense(inner, p + "/output/dense")

    def ln(self, x, scope):
        return layer_norm(x, self.w[scope + "/gamma"], self.w[scope + "/beta"], self.eps)

    def encode(self, ids, mask, types):
        w = self.w
        batch, length = ids.shape
        x = (w["bert/embeddings/word_embeddings"][ids]
             + w["bert/embeddings/token_type_embeddings"][types]
             + w["bert/embeddings/position_embeddings"][:length][None])
        x = self.ln(x, "bert/embeddings/LayerNorm")
        embedding_output = x
        hidden = x.shape[-1]
        d = hidden // self.num_heads
        adder = (1.0 - mask.astype(np.float64))[:, None, None, :] * -10000.0
        layers = []
        for i in range(self.num_layers):
            p = f"bert/encoder/layer_{i}"

            def heads(t):
                return t.reshape(batch, length, self.num_heads, d).transpose(0, 2, 1, 3)

            source = (self.ln(x, p + "/attention/output/LayerNorm") if self.pre_layer_norm
                      else x)
            q = heads(self.dense(source, p + "/attention/self/query"))
            k = heads(self.dense(source, p + "/attention/self/key"))
            v = heads(self.dense(source, p + "/attention/self/value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + adder
            ctx = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            if self.pre_layer_norm:
                x = x + self.dense(ctx, p + "/attention/output/dense")
                x = x + self.feed_forward(self.ln(x, p + "/output/LayerNorm"), p)
            else:
                x = self.ln(self.dense(ctx, p + "/attention/output/dense") + x,
                            p + "/attention/output/LayerNorm")
                x = self.ln(self.feed_forward(x, p) + x, p + "/output/LayerNorm")
            layers.append(x)
        if self.pre_layer_norm:
            x = layers[-1] = self.ln(x, "bert/encoder/LayerNorm")
        pooled = np.tanh(self.dense(x[:, 0], "bert/pooler/dense"))
        return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": layers,
                "embedding_output": embedding_output}

    def mlm_logits(self, sequence_output, positions):
        w = self.w
        gathered = np.take_along_axis(sequence_output, positions[:, :, None], axis=1)
        t = self.act(self.dense(gathered, "cls/predictions/transform/dense"))
        t = self.ln(t, "cls/predictions/transform/LayerNorm")
        return t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]

    def nsp_logits(self, pooled):
        return (pooled @ self.w["cls/seq_relationship/output_weights"].T
                + self.w["cls/seq_relationship/output_bias"])


def hf_to_tf1_names(state):
    """Map a Hugging Face BertModel state dict to TF1 names, written independently for the tests."""
    out = {}
    for name, value in state.items():
        name = name[5:] if name.startswith("bert.") else name
        if name.endswith("position_ids"):
            continue
        parts = name.split(".")
        if parts[0] == "embeddings" and parts[1].endswith("_embeddings"):
            out[f"bert/embeddings/{parts[1]}"] = value
            continue
        leaf = parts[-1]
        scope = "/".join(parts[:-1])
        scope = scope.replace("encoder/layer/", "encoder/layer_")
        if "LayerNorm" in scope:
            out[f"bert/{scope}/{'gamma' if leaf in ('weight', 'gamma') else 'beta'}"] = value
        elif leaf == "weight":
            out[f"bert/{scope}/kernel"] = value.T
        else:
            out[f"bert/{scope}/bias"] = value
    return out
