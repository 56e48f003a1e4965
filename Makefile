# `make demo` and `make test` each build .venv from nothing on a fresh clone.
PYTHON ?= python3
# Python caches compiled modules (and pytest its assertion-rewritten tests) unless told not to; some
# sandboxes tell it not to, which costs every test process 3-4 s of compiling. Let it cache.
unexport PYTHONDONTWRITEBYTECODE
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
SEED   := examples/h100_7b_seed.csv

.PHONY: install test test-slow fuzz mutation test-ray test-integration lint demo bench real-server clean

# PyTorch for bench-local/calibrate and their tests, pinned: on this project's machines pip takes a CPU
# build from local disk. Elsewhere pass TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU
# build (plain PyPI gives a CUDA build of several GB).
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q '$(TORCH_SPEC)' $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e '.[dev,local]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# the default run on PYTEST_WORKERS processes (pytest-xdist; worksteal balances the few long tests): three on two
# cores, since a fifth of the run waits on real time (the emulator and bench tests) while the rest computes; BLAS
# on one thread each (its idle threads spin). The wall-clock tests hold with the cores busy elsewhere: the emulator
# runs in its own process and a bench point counts only where the client's self-check passed. PYTEST_WORKERS=0
# runs in one process.
PYTEST_WORKERS ?= 3
test: lint
	OPENBLAS_NUM_THREADS=1 $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal

# the timing tests at full length, the browser checks, every documented example in its own process, and the heavy
# scenario tests (a plan search, bench against an emulator: a few seconds each) the default run leaves out
test-slow: $(STAMP)
	$(BIN)/pytest -q -m 'slow or heavy'

# the property tests with 2,000 generated inputs each (the default run draws 50)
fuzz: $(STAMP)
	TOKENROOF_FUZZ_EXAMPLES=2000 $(BIN)/pytest -q tests/test_properties.py tests/test_emulate*.py tests/test_fuzz_inputs.py -p no:cacheprovider

# mutation testing (mutmut, [tool.mutmut] in pyproject.toml) over the model, fit, predict, advise and scheduler
# modules: prints killed / total per module and overall. Not part of `make test`: the first full run takes hours
# on 2 cores; later runs re-check only what changed. MUTATION_ARGS="--sample 40" gives a seeded estimate.
MUTATION_CHILDREN ?= 2
MUTATION_ARGS ?=
mutation: $(STAMP)
	$(BIN)/python scripts/mutation_score.py --max-children $(MUTATION_CHILDREN) $(MUTATION_ARGS)

# plan's --ray search and bench --ray's workers on a local Ray cluster (Ray is an optional extra, ~80 MB)
test-ray: $(STAMP)
	$(BIN)/python -m pip install -q 'ray>=2.9'
	$(BIN)/pytest -q -m ray

# needs scripts/build_llama_server.sh run once (builds llama.cpp's llama-server, ~11 minutes on 2 cores)
test-integration: $(STAMP)
	$(BIN)/python -m pip install -q gguf
	$(BIN)/pytest -q -s -m integration

demo: $(STAMP)
	@echo "== 1. The founding question from first principles: a 7B model in bf16 on an H100, ~300-token context =="
	$(BIN)/tokenroof roofline --model llama-2-7b --hardware h100-sxm --context 300 --batch 1 8 32 128 256 512
	@$(BIN)/tokenroof roofline --model llama-2-7b --hardware h100-sxm --context 300 --batch 1 8 32 128 256 512 --json > demo-roofline.json
	@echo
	@echo "== 2. From the measured table, taking the user's word that the compute roof is at batch 128 =="
	$(BIN)/tokenroof predict $(SEED) --batch 256 512 --critical-batch 128
	@echo
	@echo "== 3. The same table, data only: what the four points support without that assertion =="
	$(BIN)/tokenroof predict $(SEED) --batch 256 512
	@echo
	@echo "== 4. The same table with the physics prior (model and hardware known) =="
	$(BIN)/tokenroof predict $(SEED) --batch 256 512 --model llama-2-7b --hardware h100-sxm --context 300
	@$(BIN)/tokenroof predict $(SEED) --batch 1 2 4 8 16 32 64 128 256 384 512 --model llama-2-7b --hardware h100-sxm --context 300 --json > demo-predict.json
	@echo
	@echo "== 5. What batch cap meets a 30 ms TPOT target on that server? =="
	$(BIN)/tokenroof advise $(SEED) --tpot-slo-ms 30 --model llama-2-7b --hardware h100-sxm --context 300
	@$(BIN)/tokenroof advise $(SEED) --tpot-slo-ms 30 --model llama-2-7b --hardware h100-sxm --context 300 --json > demo-advise.json
	@echo
	@echo "== 6. Capacity plan: 40 req/s of 1,000-in/300-out traffic, p99 TTFT <= 1 s and p99 TPOT <= 50 ms =="
	$(BIN)/tokenroof plan --model llama-3.1-8b --hardware h100-sxm --request-rate 40 --input-len 1000 --output-len 300 --ttft-slo-ms 1000 --tpot-slo-ms 50
	@$(BIN)/tokenroof plan --model llama-3.1-8b --hardware h100-sxm --request-rate 40 --input-len 1000 --output-len 300 --ttft-slo-ms 1000 --tpot-slo-ms 50 --json > demo-plan.json
	@echo
	@echo "== 7. One replica of that deployment under rising load: latency and goodput against the request rate =="
	$(BIN)/tokenroof simulate --model llama-3.1-8b --hardware h100-sxm --request-rate 10,20,30,40 --num-requests 2000 --ttft-slo-ms 1000 --tpot-slo-ms 50
	@$(BIN)/tokenroof simulate --model llama-3.1-8b --hardware h100-sxm --request-rate 10,20,30,40 --num-requests 2000 --ttft-slo-ms 1000 --tpot-slo-ms 50 --json > demo-simulate.json
	@echo
	@echo "== 8. This machine's own roof: calibrate it, then time a 123M-parameter Llama (random weights) in fp32 =="
	$(BIN)/tokenroof calibrate --model examples/llama-123m.json --dtype fp32 --out calibrated.toml
	$(BIN)/tokenroof bench-local --model examples/llama-123m.json --dtype fp32 --batch 1,4,16,64,256 --context 128 --steps 5 --hardware calibrated.toml --out bench-local-llama-123m.csv
	@echo
	@echo "== 9. Steps 1-7 on one page: decode curve, advice, plan and load sweep (open it in a browser) =="
	$(BIN)/tokenroof report demo-roofline.json demo-predict.json demo-advise.json demo-plan.json demo-simulate.json $(SEED) --out report.html --title "tokenroof demo: 7-8B models on an H100"
	@echo "the report is $(CURDIR)/report.html"

bench: $(STAMP)
	$(BIN)/python benchmarks/sweep_speed.py
	$(BIN)/python benchmarks/accuracy.py
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/open_loop.py
	$(BIN)/python benchmarks/length_spread.py
	$(BIN)/python benchmarks/contexts.py
	$(BIN)/python benchmarks/first_principles.py
	$(BIN)/python benchmarks/fit_scale.py
	$(BIN)/python benchmarks/client_overhead.py
	$(BIN)/python benchmarks/simulate_speed.py
	$(BIN)/python benchmarks/local_roofline.py
	$(BIN)/python benchmarks/bench_power.py

# simulate against a real engine (issue 28): `tokenroof serve` (llama-123m, one CPU thread) swept, fitted, loaded
real-server: $(STAMP)
	$(BIN)/python benchmarks/real_server.py --serve examples/llama-123m.json --requests 60 --tpot-slo-ms 110 --ttft-slo-ms 1500 --out real-server-out

clean:
	rm -rf $(VENV) mutants real-server-out .llama .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info benchmarks/out-local
	rm -f calibrated.toml bench-local-*.csv report.html demo-roofline.json demo-predict.json demo-advise.json demo-plan.json demo-simulate.json
