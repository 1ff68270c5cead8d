# The verbs of the project. `make demo` and `make test` are all a newcomer needs (README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PACK_VENV := policies/.venv
CHECKOV_VENV := .tools/checkov
STACKS := aws-enterprise-prod azure-smb-dev
OUT := out
# The packaged Helm charts plan and check render from (`mlplatform charts pull` fills .charts instead).
export MLPLATFORM_CHARTS ?= ../shared/charts

.PHONY: setup setup-policy demo test lint bench clean

setup: $(BIN)/.installed $(PACK_VENV)/.installed $(CHECKOV_VENV)/.installed

# Just what `mlplatform plan` and `check` need (no torch): for CI runners such as GitHub's.
setup-policy: $(BIN)/.installed-infra $(PACK_VENV)/.installed

# The program, the workloads and the dev tools, pinned by constraints.txt (a full freeze).
$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[infra,train,serve,dev]'
	touch $@ $(BIN)/.installed-infra

$(BIN)/.installed-infra: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[infra]'
	touch $@

# The policy pack runs in its own venv, as `pulumi preview --policy-pack` gives it one
# (pulumi-policy pins protobuf 5, which onnx cannot share).
$(PACK_VENV)/.installed: policies/requirements.txt
	$(PYTHON) -m venv $(PACK_VENV)
	$(PACK_VENV)/bin/python -m pip install --quiet -r policies/requirements.txt
	touch $@

# checkov pins its own dependency tree; it scans the exported manifests in the tests.
$(CHECKOV_VENV)/.installed: tools/checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r tools/checkov.txt
	touch $@

demo: setup
	@for stack in $(STACKS); do \
		$(BIN)/mlplatform plan $$stack --json $(OUT)/$$stack.json --manifests $(OUT)/manifests/$$stack || exit $$?; \
	done
	$(BIN)/mlplatform check $(STACKS) --sarif $(OUT)/policy.sarif

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	cd policies && MYPYPATH=. ../$(BIN)/mypy --config-file ../pyproject.toml \
		--python-executable .venv/bin/python __main__.py mlplatform_policies tools

# Each prints its ratios measured side by side in one run; on 2 cores, a few minutes each.
bench: setup
	$(BIN)/python benchmarks/plan_bench.py
	$(BIN)/python benchmarks/train_bench.py
	$(BIN)/python benchmarks/serve_bench.py

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache
