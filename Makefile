# The verbs of the project. `make demo` and `make test` are all a newcomer needs (README.md).
PYTHON ?= python3
# The one Python the project supports (pyproject.toml requires-python); every venv is built by it.
PYTHON_MINOR := 3.11
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
VENV := .venv
BIN := $(VENV)/bin
PACK_VENV := policies/.venv
CHECKOV_VENV := .tools/checkov
STACKS := aws-enterprise-prod azure-smb-dev
INFRA_VENV := build/infra-venv
OUT := out
# The serving benchmark's peers (benchmarks/peers/<peer>.txt), each in its own venv.
BENCH_VENV := .venv-bench
PEERS := litserve kserve mlserver bentoml
# Each venv's stamp names the interpreter that built it: a venv built by another Python is rebuilt.
STAMP := .installed-$(PYTHON_VERSION)

.PHONY: setup setup-policy python demo test test-infra lint bench bench-setup bench-serve clean

setup: python $(BIN)/$(STAMP) $(PACK_VENV)/$(STAMP) $(CHECKOV_VENV)/$(STAMP)
	@echo "set up; to put mlplatform's commands on PATH: source .venv/bin/activate"

python:
	@case "$(PYTHON_VERSION)" in $(PYTHON_MINOR).*) ;; \
		"") echo "error: $(PYTHON) not found (or it does not run); ml-platform needs Python $(PYTHON_MINOR) (make PYTHON=python$(PYTHON_MINOR) ...)" >&2; \
		exit 2;; \
		*) echo "error: $(PYTHON) is Python $(PYTHON_VERSION); ml-platform needs $(PYTHON_MINOR) (make PYTHON=python$(PYTHON_MINOR) ...)" >&2; \
		exit 2;; esac

# Just what `mlplatform plan` and `check` need (no torch): for CI runners such as GitHub's.
setup-policy: python $(BIN)/$(STAMP)-infra $(PACK_VENV)/$(STAMP)

# The program, the workloads and the dev tools, pinned by constraints.txt (a full freeze).
$(BIN)/$(STAMP): pyproject.toml constraints.txt | python
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[infra,train,serve,dev]'
	touch $@ $(BIN)/$(STAMP)-infra

$(BIN)/$(STAMP)-infra: pyproject.toml constraints.txt | python
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[infra]'
	touch $@

# The policy pack runs in its own venv, as `pulumi preview --policy-pack` gives it one
# (pulumi-policy pins protobuf 5, which onnx cannot share).
$(PACK_VENV)/$(STAMP): policies/requirements.txt | python
	$(PYTHON) -m venv --clear $(PACK_VENV)
	$(PACK_VENV)/bin/python -m pip install --quiet -r policies/requirements.txt
	touch $@

# checkov pins its own dependency tree; it scans the exported manifests in the tests.
$(CHECKOV_VENV)/$(STAMP): tools/checkov.txt | python
	$(PYTHON) -m venv --clear $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r tools/checkov.txt
	touch $@

# Only what planning and checking need (no torch, no checkov). The findings first (progress on stderr),
# then each stack's summary, so the screen ends with what the stacks are; a finding still fails it.
demo: setup-policy
	@status=0; $(BIN)/mlplatform check $(STACKS) --sarif $(OUT)/policy.sarif || status=$$?; \
	for stack in $(STACKS); do \
		echo; $(BIN)/mlplatform plan $$stack --json $(OUT)/$$stack.json --manifests $(OUT)/manifests/$$stack || exit $$?; \
	done; exit $$status

# Static analysis (make lint), the suite in two processes (pytest-xdist; each module stays on one, with its
# servers), then test-infra; pytest lists its fifteen slowest tests (issue 41), and the time of each step is
# the last line printed. What CI runs (.ci/run). A worker that dies ends the run with the test it was
# running (--max-worker-restart=0): with --dist loadscope, a replaced worker left xdist waiting forever for
# the dead one's module (pytest-xdist 3.8.0, seen here).
PYTEST_WORKERS ?= 2
test: setup
	@linted=$$(date +%s); $(MAKE) --no-print-directory lint || { echo "make test: lint failed"; exit 1; }; \
	start=$$(date +%s); lint_time=$$(printf '%dm%02ds' $$(((start - linted) / 60)) $$(((start - linted) % 60))); \
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder --max-worker-restart=0 \
		--durations=15; status=$$?; \
	tests=$$(date +%s); pytest_time=$$(printf '%dm%02ds' $$(((tests - start) / 60)) $$(((tests - start) % 60))); \
	if [ $$status -ne 0 ]; then echo "make test: lint $$lint_time, pytest $$pytest_time, failed (test-infra not run)"; exit $$status; fi; \
	$(MAKE) --no-print-directory test-infra; status=$$?; end=$$(date +%s); \
	printf 'make test: lint %s, pytest %s, test-infra %dm%02ds%s\n' $$lint_time $$pytest_time $$(((end - tests) / 60)) \
		$$(((end - tests) % 60)) "$$([ $$status -eq 0 ] || echo ', failed')"; \
	exit $$status

# What `pulumi up` installs (requirements.txt: the infra extra, no torch, numpy or uvicorn) plans every
# stack and judges them all; train says which extra it lacks. pip's cache makes a rebuild quick.
$(INFRA_VENV)/$(STAMP): requirements.txt pyproject.toml constraints.txt | python
	$(PYTHON) -m venv --clear $(INFRA_VENV)
	$(INFRA_VENV)/bin/python -m pip install --quiet --no-compile -r requirements.txt
	touch $@

test-infra: $(INFRA_VENV)/$(STAMP) $(PACK_VENV)/$(STAMP)
	@for stack in $$(ls stacks | sed -n 's/^Pulumi\.\(.*\)\.yaml$$/\1/p'); do \
		$(INFRA_VENV)/bin/mlplatform plan $$stack --quiet || exit $$?; \
	done
	$(INFRA_VENV)/bin/mlplatform check --all
	@$(INFRA_VENV)/bin/mlplatform train --local 2>&1 | grep -q "needs the train extra" \
		|| { echo "error: train in the infrastructure install does not name its extra" >&2; exit 1; }

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/bandit -q --severity-level high -r components workloads judges mlplatform
	cd policies && MYPYPATH=. ../$(BIN)/mypy --config-file ../pyproject.toml \
		--python-executable .venv/bin/python __main__.py mlplatform_policies tools

# Each prints its ratios measured side by side in one run; on 2 cores, a few minutes each (serving: about
# twenty, against the peers).
bench: setup bench-setup
	$(BIN)/python benchmarks/plan_bench.py
	$(BIN)/python benchmarks/train_bench.py
	$(BIN)/python benchmarks/serve_bench.py
	$(BIN)/python benchmarks/shadow_bench.py

# The peers the serving benchmark compares ours with, each in its own venv from its frozen requirements:
# their pins conflict with the product's (constraints.txt) and with each other's. Never part of setup,
# test or CI.
bench-setup: $(foreach peer,$(PEERS),$(BENCH_VENV)/$(peer)/$(STAMP))

$(BENCH_VENV)/%/$(STAMP): benchmarks/peers/%.txt | python
	$(PYTHON) -m venv --clear $(BENCH_VENV)/$*
	$(BENCH_VENV)/$*/bin/python -m pip install --quiet -r $<
	touch $@

bench-serve: setup bench-setup
	$(BIN)/python benchmarks/serve_bench.py

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache
