# The two commands of the README. Each creates or refreshes .venv first, so a fresh
# clone needs nothing but Python 3.11, 3.12 or 3.13 and network access to PyPI.
#
# A venv belongs to one Python version. Without PYTHON, an existing .venv keeps the
# Python it was built with; PYTHON=... naming another version rebuilds .venv with it.
VENV := .venv
BIN := $(VENV)/bin
ifeq ($(origin PYTHON),undefined)
PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
endif
PYVER_OF = import sys; print("%d.%d" % sys.version_info[:2])
PYVER := $(shell $(PYTHON) -c '$(PYVER_OF)' 2>/dev/null)
# One stamp per Python version, so a change of version is a missing stamp.
STAMP := $(VENV)/.installed-$(PYVER)

# Test files run in this many processes (one file stays in one process, with its
# servers); many tests wait on servers and timed replays. From four on, the last runs
# at a lower priority and takes only files marked pure (tests/lanes.py).
TEST_PROCESSES ?= 4

.PHONY: demo test lint venv clean

# Where PYTHONDONTWRITEBYTECODE is set (this machine kind sets it), every Python process
# the demo and the suite start would compile each module it imports, every time: unset,
# the first process to import a module writes its .pyc for the others.
RUN := env -u PYTHONDONTWRITEBYTECODE

demo: $(STAMP)
	$(RUN) $(BIN)/bidsim replay fixtures/openrtb/sample-stream.jsonl.gz --warmup 2 --audit-ledger \
		--json demo-report.json --html demo-report.html

test: $(STAMP) lint
	@# pytest exits 5 when it collected no test: that is a failure here, not a pass.
	$(RUN) $(BIN)/pytest -n $(TEST_PROCESSES) --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13) and "bidsim needs Python 3.11, 3.12 or 3.13 (set PYTHON=...)")'
	@old=$$([ -x $(BIN)/python ] && $(BIN)/python -c '$(PYVER_OF)'); \
	if [ -n "$$old" ] && [ "$$old" != "$(PYVER)" ]; then \
		echo "make: $(VENV) has Python $$old, PYTHON=$(PYTHON) is $(PYVER): rebuilding $(VENV)"; \
		rm -rf $(VENV); \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs the same packages as pip in a fraction of the time (it fetches and
	@# unpacks in parallel). It does not byte-compile them: the few thousand modules the
	@# project imports are compiled by the first process that imports each (RUN above),
	@# not all ten thousand at install.
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	rm -f $(VENV)/.installed*
	touch $(STAMP)

clean:
	rm -rf $(VENV) demo-report.json demo-report.html
