# The two commands of the README:
#   make serve   start one broker with the embedded default (127.0.0.1:9092, data in ./data)
#   make test    install everything the tests need, then run the whole suite
#                (ruff, mypy and lint-imports beside pytest on xdist workers: scripts/test)
# and for the inner loop of development:
#   make test-quick   the checks and the unit and sans-I/O tests (no broker, no JVM), about a minute
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test test-quick lint install install-test bench-storage

$(BIN)/odradek: pyproject.toml
	scripts/bootstrap
	@touch $@

install: $(BIN)/odradek

serve: install
	$(BIN)/odradek serve --config config/server.properties $(ARGS)

install-test:
	scripts/bootstrap --test

test: install-test
	scripts/test $(PYTEST_ARGS)

# The inner loop: the checks, and the tests of the sans-I/O rooms and storage (no broker
# process, no ZooKeeper, no JVM; not the crash loops marked slow) on two workers. What it
# leaves out runs in `make test` (and CI), which runs everything.
QUICK_TESTS := tests/records tests/protocol tests/coordinator tests/storage tests/client \
	tests/test_histogram.py tests/test_text.py
test-quick: install-test
	PYTEST_WORKERS=2 scripts/test -q -m "not interop and not slow" $(QUICK_TESTS) $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

bench-storage: install
	$(BIN)/python bench/storage.py
