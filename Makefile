# Two entry points: `make demo` (install, build the sample catalog, show it off) and
# `make test` (install dev tools, lint, type-check, run the tests). Both create .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DB := .demo/catalog.db
# Where torch comes from: empty = the default index (CPU build on these machines); elsewhere
# without a GPU, TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU build.
TORCH_INDEX ?=
TORCH_PIP := torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
TOOLCAT := $(BIN)/toolcat --db $(DEMO_DB)
FEDERATED := $(BIN)/toolcat --db .demo/federated.db

.PHONY: demo test test-slow install dev lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# install: serving and reindexing with the packaged retriever need no torch. dev adds the
# `train` extra (sentence-transformers: the tests check the base MiniLM and its export), so
# torch==2.13.0 goes first: it resolves to the CPU build these machines carry; an unpinned
# torch pulled in by sentence-transformers would download gigabytes of CUDA packages.
install: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[embeddings,fast,mcp,console,metrics]'

dev: $(BIN)/python
	$(BIN)/python -m pip install -q $(TORCH_PIP)
	$(BIN)/python -m pip install -q -e '.[dev,embeddings,train,fast,mcp,console,metrics]'

demo: install
	rm -rf .demo && mkdir -p .demo
	$(TOOLCAT) register data/toolkits
	@echo; echo '$$ toolcat list --tag filesystem --tag read-only'
	$(TOOLCAT) list --tag filesystem --tag read-only
	@echo; echo '$$ toolcat search "remove an old file"   # finds a deferred tool'
	$(TOOLCAT) search "remove an old file" -k 3
	@echo; echo '$$ toolcat show files.delete_file'
	$(TOOLCAT) show files.delete_file
	@echo; echo '$$ toolcat search "prime factors of a number"   # another deferred tool, then call it'
	$(TOOLCAT) search "prime factors of a number" -k 1
	$(TOOLCAT) call math.prime_factors --args '{"n": 360}'
	@echo; echo '$$ toolcat reindex   # embed the tools (toolcat-tool-retriever-v1, packaged, offline, no torch)'
	$(TOOLCAT) reindex
	@echo; echo '$$ toolcat search "erase an old document"   # hybrid: BM25 + embeddings'
	$(TOOLCAT) search "erase an old document" -k 3
	@echo; echo '$$ toolcat search "(?i)time ?zone" --mode regex'
	$(TOOLCAT) search "(?i)time ?zone" --mode regex -k 3
	$(TOOLCAT) status
	@echo; echo '$$ toolcat export --format anthropic --query "convert between time zones" -k 2 --tools-only'
	$(TOOLCAT) export --format anthropic --query "convert between time zones" -k 2 --tools-only
	@echo; echo '$$ # six MCP servers, one per sample toolkit (toolcat serve --plain), imported and searched as one'
	mkdir -p .demo/servers
	for kit in data files math sqlite text time; do \
	  $(BIN)/toolcat --db .demo/servers/$$kit.db register data/toolkits/$$kit.yaml > /dev/null; \
	  $(FEDERATED) register --mcp-stdio "$(CURDIR)/$(BIN)/toolcat --db $(CURDIR)/.demo/servers/$$kit.db serve --plain" --toolkit mcp-$$kit; \
	done
	$(FEDERATED) search "how many days between two dates" -k 3
	$(FEDERATED) call mcp-math.prime_factors --args '{"n": 360}'

lint: dev
	$(BIN)/ruff check src tests scripts
	$(BIN)/mypy

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): the
# tests start hundreds of toolcat processes, each compiling every module again without it.
# TEST_WORKERS pytest-xdist workers, each taking whole files (a file's tests share its
# servers and folders): much of the suite waits on child processes, servers and timeouts, so
# three workers on two cores took 505 s where one took 819. `make test TEST_WORKERS=0`
# runs it in one process.
TEST_WORKERS ?= 3
test: lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile

# The slow suites (marked `slow`): CI runs them after `make test`.
test-slow: dev
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -m slow || [ $$? -eq 5 ]  # 5: none marked slow

bench: install
	$(BIN)/python scripts/bench_catalog.py

clean:
	rm -rf $(VENV) .demo .bench build dist src/*.egg-info
