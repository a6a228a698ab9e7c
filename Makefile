# The two commands of the README. Each creates or refreshes .venv first, so a fresh
# clone needs nothing but Python 3.11 and network access to PyPI.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint venv clean

demo: $(STAMP)
	$(BIN)/bidsim replay fixtures/openrtb/sample-stream.jsonl.gz --warmup 2 --json demo-report.json

test: $(STAMP) lint
	@# pytest exits 5 when it collected no test: that is a failure here, not a pass.
	$(BIN)/pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and "bidsim needs Python 3.11 (set PYTHON=...)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) demo-report.json
