"""The original's optimiser and learning-rate schedule (SPEC.md section 7), plus LAMB.

`AdamWeightDecay` is the original's: Adam moments with NO bias correction, epsilon 1e-6, and a
decoupled weight decay added to the update (`update = m / (sqrt(v) + eps) + wd * param`), except for
variables whose names contain `LayerNorm`, `layer_norm` or `bias`; gradients are clipped to global
norm 1.0 first. `Lamb` adds bias correction and the layer-wise trust ratio ||w|| / ||update||
(You et al. 2019, as in NVIDIA's BERT). Gradient accumulation is done by the training loop, which
calls the optimiser once per accumulated batch, so the schedule advances once per real update.
"""
from __future__ import annotations

import keras
from keras import ops

DECAY_EXCLUSIONS = ("LayerNorm", "layer_norm", "bias")


@keras.saving.register_keras_serializable(package="bert")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup `init_lr * step / warmup` for step < warmup, else polynomial decay to
    `end_learning_rate` over `num_train_steps`, evaluated at the global step (not re-based)."""

    def __init__(self, init_lr, num_train_steps, num_warmup_steps=0, end_learning_rate=0.0,
                 power=1.0):
        self.init_lr = init_lr
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.end_learning_rate = end_learning_rate
        self.power = power

    def __call__(self, step):
        step = ops.cast(step, "float32")
        progress = ops.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
        decayed = ((self.init_lr - self.end_learning_rate) * ops.power(1.0 - progress, self.power)
                   + self.end_learning_rate)
        if not self.num_warmup_steps:
            return decayed
        warmup = self.init_lr * step / float(self.num_warmup_steps)
        return ops.where(step < float(self.num_warmup_steps), warmup, decayed)

    def get_config(self):
        return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power}


def budget_learning_rate(progress: float, peak: float, warmup_proportion: float,
                         warmup_start_fraction: float = 0.0) -> float:
    """The learning rate of a run on a time budget at `progress`, the share of the budget spent
    (clipped to [0, 1]): a line from `warmup_start_fraction * peak` up to `peak` at
    `warmup_proportion`, then a line down to 0 at the budget's end. (0.75, 0.25): Cramming's
    "budget-triangle2". (Unlike `WarmupPolynomialDecay`, the original's, the decay starts from
    the peak: the original decays from step 0, so its rate drops at the warm-up's end.)"""
    p = min(max(float(progress), 0.0), 1.0)
    if p < warmup_proportion:
        return peak * (warmup_start_fraction
                       + (1.0 - warmup_start_fraction) * p / warmup_proportion)
    if warmup_proportion >= 1.0:
        return peak
    return peak * (1.0 - p) / (1.0 - warmup_proportion)


def _matches(variable, patterns) -> bool:
    return any(p in variable.path for p in patterns)


class _DecoupledDecayOptimizer(keras.optimizers.Optimizer):
    """Shared state of the two: Adam moments, which variables get weight decay, and clipping.

    Gradients are clipped to `global_clipnorm` after they are summed over replicas, so several
    replicas clip the same global gradient as one process on the whole batch (Keras's own
    clipping runs on each replica's share before the sum).
    """

    def __init__(self, learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                 exclude_from_weight_decay, global_clipnorm, name, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.clip_norm = global_clipnorm
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.clips_in_apply = True  # False in `compiled_apply`, which clips first itself

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["adam_m", "adam_v"])
        self._decays = [self.weight_decay_rate > 0
                        and not _matches(v, self.exclude_from_weight_decay) for v in var_list]

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """The TensorFlow backend's cross-replica sum, then the global-norm clip."""
        reduced = list(super()._all_reduce_sum_gradients(grads_and_vars))
        if not self.clips_in_apply:
            return reduced
        grads = self.clipped_dense([g for g, _ in reduced])
        return [(g, v) for g, (_, v) in zip(grads, reduced)]

    def clipped_dense(self, grads: list) -> list:
        """`grads` clipped to `global_clipnorm`, then dense (None stays None). The norm is the
        original's: of an embedding gather's IndexedSlices *values*, where a token seen twice
        counts twice, not of the summed dense gradient, so it is taken before densifying."""
        import tensorflow as tf

        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if self.clip_norm and present:
            clipped, _ = tf.clip_by_global_norm([grads[i] for i in present], self.clip_norm)
            for i, g in zip(present, clipped):
                grads[i] = g
        # Embedding gathers give IndexedSlices; the Adam update is dense, as the original's.
        return [None if g is None else tf.convert_to_tensor(g) for g in grads]

    def compiled_apply(self, variables: list):
        """`apply` on one device, XLA-compiled; returns a function of the gradients. Only dense
        tensors enter the compiled part: an embedding's IndexedSlices change shape with every
        batch width, and each new shape would compile it again (seconds each). The clip needs
        those IndexedSlices, so it runs first, outside (`clipped_dense`). (Taking their share of
        the norm outside and clipping inside the compiled part measured no faster.)"""
        import tensorflow as tf

        self.clips_in_apply = False
        compiled = tf.function(lambda grads: self.apply(grads, variables), jit_compile=True,
                               autograph=False)
        return lambda grads: compiled(self.clipped_dense(grads))

    def _moments(self, gradient, variable):
        """Update the first and second moments of `variable`; return them and whether it decays.

        Name-based choices are made once in `build`: here `variable` may be the backend's own."""
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        gradient = ops.cast(gradient, variable.dtype)
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient))
        return m, v, self._decays[index]

    def get_config(self):
        return {**super().get_config(), "global_clipnorm": self.clip_norm,
                "weight_decay_rate": self.weight_decay_rate,
                "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay)}


@keras.saving.register_keras_serializable(package="bert")
class AdamWeightDecay(_DecoupledDecayOptimizer):
    """The original BERT optimiser (see the module docstring)."""

    def __init__(self, learning_rate=1e-3, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, exclude_from_weight_decay=DECAY_EXCLUSIONS, global_clipnorm=1.0,
                 name="AdamWeightDecay", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                         exclude_from_weight_decay, global_clipnorm, name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        m, v, decays = self._moments(gradient, variable)
        update = m / (ops.sqrt(v) + self.epsilon)
        if decays:
            update = update + self.weight_decay_rate * variable
        self.assign(variable, variable - ops.cast(learning_rate, variable.dtype) * update)


@keras.saving.register_keras_serializable(package="bert")
class Lamb(_DecoupledDecayOptimizer):
    """LAMB: bias-corrected Adam direction plus decay, scaled per variable by ||w|| / ||r||."""

    def __init__(self, learning_rate=1e-3, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, exclude_from_weight_decay=DECAY_EXCLUSIONS,
                 exclude_from_layer_adaptation=None, global_clipnorm=1.0, name="Lamb", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                         exclude_from_weight_decay, global_clipnorm, name, **kwargs)
        self.exclude_from_layer_adaptation = tuple(
            exclude_from_weight_decay if exclude_from_layer_adaptation is None
            else exclude_from_layer_adaptation)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adapts = [not _matches(v, self.exclude_from_layer_adaptation) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        m, v, decays = self._moments(gradient, variable)
        step = ops.cast(self.iterations + 1, variable.dtype)
        m_hat = m / (1.0 - ops.power(self.beta_1, step))
        v_hat = v / (1.0 - ops.power(self.beta_2, step))
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if decays:
            update = update + self.weight_decay_rate * variable
        ratio = 1.0
        if self._adapts[self._get_variable_index(variable)]:
            w_norm = ops.norm(ops.reshape(variable, (-1,)))
            u_norm = ops.norm(ops.reshape(update, (-1,)))
            ratio = ops.where(w_norm > 0, ops.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
        self.assign(variable,
                    variable - ratio * ops.cast(learning_rate, variable.dtype) * update)

    def get_config(self):
        return {**super().get_config(),
                "exclude_from_layer_adaptation": list(self.exclude_from_layer_adaptation)}


def create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer="adamw",
                     weight_decay_rate=0.01, on_time: bool = False):
    """The original's `create_optimizer`: the schedule above driving AdamWeightDecay (or LAMB).
    `on_time`: a plain learning-rate variable instead, which the training loop sets before each
    of its loops (`budget_learning_rate`, a run on a time budget)."""
    schedule = (float(init_lr) if on_time
                else WarmupPolynomialDecay(init_lr, num_train_steps, num_warmup_steps))
    classes = {"adamw": AdamWeightDecay, "lamb": Lamb}
    if optimizer not in classes:
        raise ValueError(f"unknown optimizer {optimizer!r}; one of {', '.join(classes)}")
    return classes[optimizer](learning_rate=schedule, weight_decay_rate=weight_decay_rate)
