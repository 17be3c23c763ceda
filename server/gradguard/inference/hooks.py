"""The hooks torch calls with a gradient, and where in their arguments that gradient is.

torch hands a tensor hook (``t.register_hook(f)``) and a module's backward pre-hook the gradient tensor that
autograd will pass on; an op such as ``AddBackward`` gives the *same* tensor to every input of the sum, so a
hook that writes it in place changes the gradient of the other branch too, silently (torch 2.13; its docs
say a hook must not modify its argument).  The interpreter runs each such hook on a stand-in for that
gradient to see its writes (``CallsMixin._gradient_hook``).
"""

from __future__ import annotations

# Position of the gradient (after ``self`` of a bound method): a tensor's hook gets the gradient itself, a
# backward pre-hook ``(module, grad_output)`` a tuple of them.  (A full backward hook's grad_input writes were
# checked with torch and change nothing else; not listed.)
GRADIENT_ARGUMENT = {"register_hook": 0, "register_full_backward_pre_hook": 1}
