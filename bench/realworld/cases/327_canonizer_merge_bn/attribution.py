from .canonizers import MergeBatchNorm


def parameter_relevance(model, pairs, inputs, target, canonizer_cls=MergeBatchNorm):
    """Gradient of the target logit w.r.t. the model's own parameters, with BN merged."""
    originals = list(model.parameters())
    canonizers = []
    for linear, batch_norm in pairs:
        canonizer = canonizer_cls()
        canonizer.apply(linear, batch_norm)
        canonizers.append(canonizer)
    try:
        out = model(inputs)
        out[:, target].sum().backward()
    finally:
        for canonizer in reversed(canonizers):
            canonizer.remove()
    return [p.grad for p in originals]
