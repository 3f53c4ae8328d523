# The two commands of the README:
#   make serve   start one broker with the embedded default (127.0.0.1:9092, data in ./data)
#   make test    install everything the tests need, then run the whole suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test lint install install-test bench-storage

$(BIN)/odradek: pyproject.toml
	scripts/bootstrap
	@touch $@

install: $(BIN)/odradek

serve: install
	$(BIN)/odradek serve --config config/server.properties $(ARGS)

install-test:
	scripts/bootstrap --test

test: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

bench-storage: install
	$(BIN)/python bench/storage.py
