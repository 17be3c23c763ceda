"""torch is the arbiter: every positive fixture really breaks autograd, every negative runs clean."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

from fixture_corpus import Fixture, all_fixtures
from gradients import grads_equal

torch = pytest.importorskip("torch")

FIXTURES = all_fixtures()


def _load(fx: Fixture):
    spec = importlib.util.spec_from_file_location(f"fixture_{fx.path.parent.name}_{fx.path.stem}", fx.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_is_large_enough():
    pos = [f for f in FIXTURES if f.positive]
    neg = [f for f in FIXTURES if not f.positive]
    assert len(pos) >= 60 and len(neg) >= 40, (len(pos), len(neg))


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.id)
def test_fixture_is_well_formed(fx: Fixture):
    if fx.positive:
        assert fx.expected, "a positive marks at least one line with # expect: CODE"
        assert (fx.expected_raise is None) != (not fx.silent), "exactly one of expect-raise / expect-silent"
    else:
        assert not fx.expected and fx.expected_raise is None and not fx.silent


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.id)
def test_torch_agrees(fx: Fixture):
    module = _load(fx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = module.reference()
        if fx.expected_raise is not None:
            with pytest.raises(fx.exception_type) as info:
                module.run()
            first_line = str(info.value).splitlines()[0]
            assert first_line.startswith(fx.expected_raise), first_line
            return
        result = module.run()
    if fx.silent:
        assert not grads_equal(result, reference), "a silent positive must change the gradients"
    else:
        assert grads_equal(result, reference), "a negative must give the reference gradients"
