"""The torch names gradguard's analysis, rules and fixes go by: each fact once, here.

Where torch can tell, a table is read from ``torch_ops.json`` (generated from the installed torch by
``generate.py``): which ops return views, which return several pieces autograd refuses to let anyone write in place,
which in-place method has an out-of-place twin, which results are bool.  The rest are API facts written by hand
(which calls make new tensors, which attributes are metadata, which NumPy function has which torch twin); each
says so.  ``tests/test_torch_names.py`` fails on a table of five or more torch names anywhere else.
"""
from __future__ import annotations

from . import load_knowledge

_K = load_knowledge()
_OPS = {name: _K.op(name) for name in _K.op_names}
TENSOR_NAMES = _K.python_names.get("Tensor", frozenset())


# ----------------------------------------------------------------------------------- views, from torch
# Tensor attributes that are autograd views of the tensor (``x.T``, ``x.mH``, ``x.real``).
VIEW_ATTRS = frozenset(name for name, kind in _K.attribute_views.items() if kind == "view")
# Tensor attributes whose value shares the tensor's memory: the views and ``x.data``.
SHARING_ATTRS = frozenset(_K.attribute_views)
# Tensor methods whose result is a view of the receiver (or several: ``split``), per the table.
VIEW_METHODS = frozenset(name for name, op in _OPS.items() if (op.view or op.multi_view) and name in TENSOR_NAMES)
# Calls that return several views of one tensor whose pieces torch refuses in-place writes to with grad mode on
# ("Output 0 of Split is a view and is being modified inplace"): chunk, split, split_with_sizes, unbind.
# (``tensor_split``'s pieces are views torch lets you write; ``unsafe_chunk``'s are no views at all.)
PIECES = frozenset(name for name, op in _OPS.items() if op.multi_view)
# Calls that return a sequence of views of one tensor, written or not: the pieces, ``tensor_split``, ``hsplit``...
SEQUENCE_VIEWS = PIECES | frozenset(name for name, op in _OPS.items() if op.view and op.returns == "sequence")

# torch's recurrent layers (``nn.LSTM``, ``nn.GRUCell``...): the classes built on ``RNNBase`` or ``RNNCellBase``.
RECURRENT_LAYERS = frozenset(f"nn.{name}" for name in _K.module_names
                             if {"RNNBase", "RNNCellBase"} & set(_K.module(name).bases[1:]))

# ------------------------------------------------------------------------------ in-place twins, from torch
# In-place methods whose twin computes something else: ``bernoulli_(p)`` fills with draws of probability ``p``,
# ``x.bernoulli()`` draws with ``x`` as the probabilities; ``resize``/``resize_as`` are deprecated autograd functions.
_TWIN_DIFFERS = frozenset({"bernoulli", "resize", "resize_as"})
# The out-of-place twins of in-place Tensor methods that are Tensor methods of the same name without the
# underscore, and not views (``add_`` -> ``add``).  An in-place method without one is written on a clone.
OUT_OF_PLACE_METHODS = frozenset(
    twin for name, twin in ((n, _K.inplace_twin(n)) for n in _K.inplace_names)
    if twin is not None and twin in TENSOR_NAMES and twin not in _TWIN_DIFFERS
    and not (_OPS.get(twin) is not None and _OPS[twin].view))
# Those whose result is bool (a comparison): their in-place form writes 0/1 in the tensor's dtype.
BOOL_RESULTS = OUT_OF_PLACE_METHODS & _K.integral_results

# ------------------------------------------------------------------------------------ written by hand
# In-place methods that act element by element (their arguments broadcast against the written tensor).
ELEMENTWISE_INPLACE = frozenset({
    "add", "sub", "mul", "div", "clamp", "clamp_min", "clamp_max", "clip", "pow", "neg", "abs", "exp", "log",
    "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "sin", "cos", "floor", "ceil", "round", "trunc", "reciprocal",
    "square", "lerp", "addcmul", "addcdiv", "masked_fill", "true_divide", "multiply", "subtract", "divide",
    "fmod", "remainder", "sign", "exp2", "expm1", "log1p", "log2", "log10", "nan_to_num",
})
# Reductions of a float tensor: its dtype, a shape that broadcasts into it.
FLOAT_REDUCTIONS = frozenset({"norm", "sum", "mean", "std", "var", "amax", "amin", "prod", "logsumexp", "nansum",
                              "nanmean"})
# Functions that join a sequence of tensors into a new one.
JOINING = frozenset({"stack", "cat", "concat", "concatenate", "hstack", "vstack"})

# Attribute reads that do not read a tensor's values (or read other objects).
NON_VALUE_ATTRS = frozenset({
    "grad", "shape", "dtype", "device", "requires_grad", "is_leaf", "ndim", "grad_fn", "is_cuda", "layout",
    "names", "is_sparse", "is_quantized", "is_meta", "itemsize", "nbytes", "is_contiguous", "size", "dim",
    "numel", "element_size", "stride", "retain_grad", "register_hook", "is_floating_point", "is_complex",
    "type", "get_device", "data_ptr", "storage_offset", "untyped_storage", "_version",
})
# Attributes whose value is not a tensor: shape and metadata.
SHAPE_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_leaf", "requires_grad", "grad_fn", "is_cuda",
                         "layout"})
# Attribute reads that are about the leaf itself, not its value: they keep naming the leaf after a copy.
LEAF_IDENTITY_ATTRS = frozenset({
    "grad", "requires_grad", "is_leaf", "grad_fn", "retain_grad", "register_hook", "requires_grad_", "retains_grad",
})
# Methods whose result may share memory with the receiver (beyond the table's view ops).
MAY_ALIAS_METHODS = frozenset({
    "detach", "contiguous", "to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long",
    "bool", "cpu", "cuda", "requires_grad_", "numpy", "view_as", "reshape_as", "expand_as", "share_memory_",
    "pin_memory", "as_subclass", "flatten", "reshape", "squeeze", "unsqueeze", "unflatten", "positive",
    "resolve_conj", "resolve_neg", "coalesce", "values", "indices", "__getitem__", "split_with_sizes",
})
# Methods that certainly return new memory and keep no reference to the receiver.
FRESH_METHODS = frozenset({
    "clone", "item", "tolist", "sum", "mean", "std", "var", "norm", "max", "min", "amax", "amin", "argmax",
    "argmin", "abs", "exp", "log", "pow", "sqrt", "sigmoid", "tanh", "relu", "softmax", "log_softmax", "clamp",
    "clip", "masked_fill", "gather", "scatter", "index_put", "index_select", "masked_select", "add", "sub",
    "mul", "div", "matmul", "mm", "bmm", "dot", "neg", "sign", "round", "floor", "ceil", "logsumexp",
    "cumsum", "cumprod", "prod", "all", "any", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf",
    "nonzero", "where", "sort", "topk", "unique", "count_nonzero", "square", "reciprocal", "rsqrt",
    "lerp", "addcmul", "addcdiv", "outer", "cross", "kthvalue", "median", "mode", "flip", "roll", "repeat",
    "repeat_interleave", "tile", "tril", "triu", "new_zeros", "new_ones", "new_empty", "new_full",
    "new_tensor", "zeros_like", "ones_like", "expm1", "log1p", "sin", "cos", "erf", "logit", "softplus",
    "nan_to_num", "fmod", "remainder", "floor_divide", "true_divide", "bernoulli", "multinomial",
    "backward", "register_hook", "copy_", "fill_", "zero_", "normal_", "uniform_", "numel", "size", "dim",
})
# Methods that convert an allocation (``probed_fixes``): those of ``SAME_TENSOR_METHODS`` its fix form is proven on.
CONVERSIONS = ("float", "double", "half", "to", "cpu", "cuda")
# torch functions whose result may be (a view of) an argument, beyond the table's view ops.
TORCH_MAY_ALIAS = frozenset({
    "dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "identity",
    "broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d", "meshgrid", "as_tensor", "asarray",
    "from_numpy", "detach", "flatten", "reshape", "squeeze", "unsqueeze",
})

# API knowledge (not autograd knowledge): which torch callables build new tensors from data.
FACTORIES = frozenset({
    "tensor", "as_tensor", "asarray", "from_numpy", "randn", "rand", "randint", "randperm", "zeros", "ones",
    "empty", "full", "arange", "linspace", "logspace", "eye", "normal", "bernoulli", "multinomial",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like", "tril_indices",
})
# Factories that copy their data argument into a new leaf: given a tensor that requires grad, the graph ends there.
GRAPH_REBUILDING_FACTORIES = frozenset({"tensor", "as_tensor", "asarray", "from_numpy"})
TENSOR_METHOD_FACTORIES = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# The factories that make a new tensor of a shape, or of another tensor's, filled with one value or none (no data).
ALLOCATIONS = frozenset(f for f in FACTORIES | TENSOR_METHOD_FACTORIES
                        if f.removeprefix("new_").removesuffix("_like") in ("zeros", "ones", "empty", "full"))
# Tensor methods whose result is not a tensor.
NOT_TENSOR_METHODS = frozenset({"item", "tolist", "numpy", "size", "dim", "numel", "stride", "data_ptr",
                                "is_contiguous", "element_size", "nelement", "ndimension", "get_device", "__len__",
                                "type"})
# Tensor methods that return the same tensor converted (or itself).
SAME_TENSOR_METHODS = frozenset({"to", "type_as", "float", "double", "half", "bfloat16", "cpu", "cuda", "type"})
# nn.Module methods that return the module.
MODULE_RETURNING_METHODS = frozenset({"train", "eval", "to", "cuda", "cpu", "float", "double", "half",
                                      "requires_grad_", "zero_grad", "apply", "share_memory"})
# Python's copy protocol: a class defining one of these decides what `copy.deepcopy` of its instances holds.
COPY_PROTOCOL = ("__deepcopy__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__")
# nn.Module methods that set ``training`` on the module and on every submodule (``eval()`` is ``train(False)``).
TRAINING_MODE_METHODS = frozenset({"train", "eval"})
# nn.Module methods that iterate over its parameters or buffers.
PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers"})
# torch.distributions classes that save their logits for backward.
DISTRIBUTIONS_SAVING_LOGITS = frozenset({"Categorical", "OneHotCategorical", "Bernoulli", "Binomial", "Multinomial",
                                         "RelaxedOneHotCategorical", "Geometric"})

# NumPy functions with a torch twin of the same meaning: name -> (torch function, NumPy keyword -> torch keyword).
NUMPY_TWINS = {
    "clip": ("clamp", {}),
    "square": ("square", {}),
    "sqrt": ("sqrt", {}),
    "exp": ("exp", {}),
    "log": ("log", {}),
    "abs": ("abs", {}),
    "absolute": ("abs", {}),
    "tanh": ("tanh", {}),
    "sin": ("sin", {}),
    "cos": ("cos", {}),
    "mean": ("mean", {"axis": "dim", "keepdims": "keepdim"}),
    "sum": ("sum", {"axis": "dim", "keepdims": "keepdim"}),
    "diff": ("diff", {"axis": "dim", "n": "n"}),
    "var": ("var", {"axis": "dim", "ddof": "correction", "keepdims": "keepdim"}),
    "std": ("std", {"axis": "dim", "ddof": "correction", "keepdims": "keepdim"}),
}
# Keywords a torch twin needs to mean what NumPy's default does: NumPy's variance divides by N (``ddof=0``),
# torch's by N - 1 unless told ``correction=0``.
NUMPY_TWIN_DEFAULTS = {"var": {"correction": "0"}, "std": {"correction": "0"}}
# NumPy functions whose first argument is a subscripts string and the rest arrays, with a torch twin of the same
# meaning (torch wants the operands of one dtype where NumPy promotes them).
NUMPY_SUBSCRIPT_TWINS = {"einsum": "einsum"}
# Methods of a NumPy array with a tensor method of the same meaning: name -> (tensor method, keyword map); a
# reduction's defaults are NUMPY_TWIN_DEFAULTS's.
NUMPY_ARRAY_METHOD_TWINS = {
    "mean": ("mean", {"axis": "dim", "keepdims": "keepdim"}),
    "sum": ("sum", {"axis": "dim", "keepdims": "keepdim"}),
    "var": ("var", {"axis": "dim", "ddof": "correction", "keepdims": "keepdim"}),
    "std": ("std", {"axis": "dim", "ddof": "correction", "keepdims": "keepdim"}),
    "reshape": ("reshape", {}),
}
# The legacy typed constructors (``torch.FloatTensor(array)``) that copy an array into a tensor of their dtype,
# and the tensor method that casts to it.
LEGACY_FLOAT_CONSTRUCTORS = {"FloatTensor": "float", "DoubleTensor": "double"}
# np.f(arr, <numbers>, out=arr) -> the torch spelling, on the tensor's name ``{t}`` and the numbers ``{0}``, ``{1}``.
NUMPY_OUT_TWINS = {
    "clip": "{t}.clamp({0}, {1})",
    "maximum": "{t}.clamp(min={0})",
    "minimum": "{t}.clamp(max={0})",
    "multiply": "{t} * {0}",
    "add": "{t} + {0}",
    "subtract": "{t} - {0}",
    "divide": "{t} / {0}",
    "true_divide": "{t} / {0}",
    "power": "{t} ** {0}",
    "negative": "-{t}",
    "abs": "{t}.abs()",
    "absolute": "{t}.abs()",
    "square": "{t}.square()",
    "sqrt": "{t}.sqrt()",
    "exp": "{t}.exp()",
    "log": "{t}.log()",
    "tanh": "{t}.tanh()",
}

# Methods whose result is a view of the receiver only when its layout allows (else a copy, or the receiver
# itself): torch 2.13 lets `.detach_()` run on a copy and refuses it on a view.
MAYBE_VIEW_METHODS = frozenset({"reshape", "reshape_as", "flatten", "contiguous"})
# torch functions whose result is a new contiguous tensor whatever their inputs' layout: a `.reshape()` of it is a view.
CONTIGUOUS_RESULTS = frozenset({"stack", "cat", "concat", "concatenate"})

# ------------------------------------------------------------------------- training loops' contracts (API facts)
# PyTorch Lightning's automatic optimisation runs backward() and the optimizer step only on what this method of a
# LightningModule returns (the loss tensor, or a dict with the key "loss"); None skips the batch (Lightning's
# documentation of ``training_step``).  ``automatic_optimization = False`` hands both to the method itself.
RETURNED_LOSS_METHOD = "training_step"
AUTOMATIC_OPTIMIZATION_FLAG = "automatic_optimization"
# The hook a LightningModule defines beside it (Lightning's own base class is the other mark of one), and the
# method a module under manual optimisation runs its backward through.
OPTIMIZER_HOOK = "configure_optimizers"
LIGHTNING_MODULE = "LightningModule"
MANUAL_BACKWARD = "manual_backward"

# NumPy functions (API facts, by hand) that turn a tensor handed to them directly into an array (``__array__``,
# which calls ``.numpy()``): torch refuses it for a tensor that requires grad.  Any top-level NumPy function does so
# for the tensors of a list or tuple it is given (``np.sum([l1, l2])`` builds an array of them first); given one
# tensor, others dispatch to the tensor's own method (``np.sum(t)`` calls ``t.sum(axis=...)``), which may fail
# otherwise or not at all.
NUMPY_ARRAY_MAKERS = frozenset({"array", "asarray", "asanyarray", "ascontiguousarray"})
NUMPY_REFUSED = "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
