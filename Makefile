# The two commands README.md gives a new user, and the ones CI and developers use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is only needed by the tests (they prove every fixture with torch) and the probe.
# Pin the CPU build that is on this machine kind; a bare `torch` pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: demo test test-fast setup setup-test bench bench-quick clean fuzz variants fix-variants realworld corpus corpus-triage

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/python -m pip install -q .

setup-test: $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test]"

# Set up, then check the bundled examples (they are meant to have findings): each finding with its location and
# notes, then the counts per rule (the second run reads the result cache the first one wrote), then the next step:
# how to run it on your own code, see the fixes and apply them (tests/test_demo.py checks all three parts).
demo: setup
	@echo "== gradguard check examples"
	@$(BIN)/gradguard check examples --exit-zero --no-progress
	@echo
	@echo "== findings per rule"
	@$(BIN)/gradguard check examples --exit-zero --no-progress --statistics --quiet
	@echo
	@echo "== next: run it on your own code (the command is in $(VENV)/bin/, not on PATH)"
	@echo "  $(VENV)/bin/gradguard check PATH          # files and folders: .py files and notebooks"
	@echo "  $(VENV)/bin/gradguard check --diff PATH   # the safe fixes as a diff; changes nothing (try it on examples; add --unsafe-fixes for all)"
	@echo "  $(VENV)/bin/gradguard check --fix PATH    # apply the safe fixes; --fix --unsafe-fixes applies the rest"
	@echo "  examples/resnet_block.py has no finding on purpose: its in-place code is safe (out += identity"
	@echo "  after BatchNorm, ReLU(inplace=True) on that sum, p -= lr * p.grad under torch.no_grad())."
	@echo "  Editors, CI and the runtime probe (--probe, which needs torch in $(VENV)): README.md."

# Set up, then run the whole test suite.
test: setup-test
	$(BIN)/python -m pytest -q

# A subset of `make test` for development, under 2 minutes on a 2-core machine: every layer once (parsing,
# inference, rules on every fixture and their torch-run examples, fixes with torch proofs, a real probe run and the
# merge, the language server through pytest-lsp, the CLI, notebooks, output formats, the demo). It sets up only
# when .venv has no pytest yet; `make test` is unchanged and still the gate.
TEST_FAST = \
	tests/test_statements.py tests/test_bad_input.py \
	tests/test_inference.py \
	tests/test_fixtures_analyzer.py tests/test_messages.py tests/test_config.py tests/test_suppressions.py \
	tests/test_rule_examples.py \
	tests/fixes/test_plan.py tests/fixes/test_fix_edits.py \
	"tests/fixes/test_fix_proof.py::test_fixed_positive_runs_clean_with_reference_gradients[GG001/pos_abs_input_l1_rescale]" \
	"tests/fixes/test_fix_proof.py::test_fixed_positive_runs_clean_with_reference_gradients[GG005/pos_module_dropout_after_relu]" \
	"tests/fixes/test_fix_proof.py::test_fixed_positive_runs_clean_with_reference_gradients[GG101/pos_actor_critic_shared_trunk]" \
	tests/probe/test_probe_merge.py tests/probe/test_probe_cli.py::test_check_probe_merges \
	tests/lsp/test_fixes.py tests/lsp/test_lsp.py::test_capabilities tests/lsp/test_lsp.py::test_open_publishes_finding \
	tests/lsp/test_lsp.py::test_suppress_code_action tests/lsp/test_lsp.py::test_hover \
	tests/lsp/test_lsp.py::test_pull_diagnostics tests/lsp/test_lsp.py::test_fix_all_applies_every_safe_fix \
	tests/test_cli.py tests/test_cli_workflows.py tests/test_notebooks.py tests/test_output_formats.py \
	tests/test_demo.py
test-fast:
	@test -x $(BIN)/pytest || $(MAKE) --no-print-directory setup-test
	$(BIN)/python -m pytest -q $(TEST_FAST)

# Every benchmark of docs/benchmarks.md in one table (builds the pinned corpus into bench/corpus/ first).
bench: setup-test
	$(BIN)/python bench/run_all.py

# The same table in under two minutes: samples and fewer iterations.
bench-quick: setup-test
	$(BIN)/python bench/run_all.py --quick

# Every fixture rewritten by every transform of tests/variants/, proven with torch, then analysed: prints the
# transform x rule recall table; misses go to .variants_out/report.json (see tests/variants/README.md).
variants: setup-test
	PYTHONPATH=server:tests $(BIN)/python -m variants

# Every fix proven on every positive variant: `check --fix --unsafe-fixes` on each, then torch runs the fixed file
# (reference()'s gradients, nothing left to find, a second --fix a no-op). Prints the per-rule table; the failures
# go to .variants_out/fix_report.json, each fixed file next to its variant (see tests/variants/README.md).
fix-variants: setup-test
	PYTHONPATH=server:tests $(BIN)/python -m variants --fixes

# Real bugs rebuilt from public threads (bench/realworld/, see its README) and ../shared/realworld-dev when present:
# every case is run under torch and checked, then static and probe recall per kind and domain are printed; the
# per-case results and the misses go to .realworld_out/.
realworld: setup-test
	$(BIN)/python bench/realworld.py verify
	$(BIN)/python bench/realworld.py score --probe

# The pinned library corpus for precision (issue 30): 44 PyPI wheels, .py files only, 2.1M lines in bench/corpus/
# (gitignored). tests/test_corpus_triage.py, part of `make test`, then checks every finding on it is triaged in
# bench/corpus_triage.json.
corpus: setup-test
	$(BIN)/python bench/build_corpus.py

corpus-triage: corpus
	$(BIN)/python -m pytest -q -s tests/test_corpus_triage.py

clean:
	rm -rf $(VENV) build *.egg-info server/*.egg-info .variants_out .variants_cache .fuzz .realworld_out

# Nightly-style: many more fuzz examples than CI's defaults (GRADGUARD_FUZZ_EXAMPLES=150 damaged fixtures,
# GRADGUARD_GRAMMAR_EXAMPLES=40 deep and long programs from tests/grammar.py).  The 10,000 grammar programs
# run as two seeded shards of 5,000, one per core, each logging every program's cost to .fuzz/SEED.log
# (`tail -f` it to see how far a run is), then 5,000 damaged fixtures.
FUZZ_GRAMMAR = $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz_grammar.py -k deep_and_long --hypothesis-show-statistics
fuzz: setup-test
	mkdir -p .fuzz && rm -f .fuzz/*.log
	GRADGUARD_FUZZ_LOG=.fuzz/20260516.log GRADGUARD_GRAMMAR_SEED=20260516 GRADGUARD_GRAMMAR_EXAMPLES=5000 $(FUZZ_GRAMMAR) & first=$$!; \
	GRADGUARD_FUZZ_LOG=.fuzz/20261124.log GRADGUARD_GRAMMAR_SEED=20261124 GRADGUARD_GRAMMAR_EXAMPLES=5000 $(FUZZ_GRAMMAR); second=$$?; \
	wait $$first && test $$second -eq 0
	GRADGUARD_FUZZ_EXAMPLES=5000 $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz.py

# The VS Code extension (needs node 20 + npm): `make vsix` builds gradguard-linux-x64.vsix (libcst for CPython
# 3.10-3.14 inside, wheels from PyPI checked against vscode-client/scripts/libcst-wheels.json) and the universal
# gradguard.vsix (no libcst); `make vsix-all` adds linux-arm64, darwin-arm64, darwin-x64 and win32-x64.
.PHONY: vsix vsix-all
vsix: $(BIN)/python
	npm ci --no-audit --no-fund
	PYTHON=$(BIN)/python npm run -s package -- universal linux-x64
vsix-all: $(BIN)/python
	npm ci --no-audit --no-fund
	PYTHON=$(BIN)/python npm run -s package:all
