# Two commands for a new machine: `make demo` and `make test`. Both create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PORT ?= 6006
HOST := 127.0.0.1
CHROMIUM := /usr/bin/chromium

.PHONY: install demo test test-fast bench browser clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -e '.[fast,test,notebook,pandas,examples,lightning,transformers,s3]'
	touch $@

# Debian's Chromium for the browser tests (never a downloaded browser).
browser:
	@test -x $(CHROMIUM) || { echo "Installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -x $(CHROMIUM) || { echo "chromium is missing: run 'apt-get install -y chromium' as root"; exit 1; }

# Two runs worth comparing (a sane learning rate and a too-high one, 45 captures each) and the
# planted-bias study (two models, Attention-IoU after every epoch: the tab's Bias view).
demo: install
	@$(PY) -c "import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); \
		ok = s.connect_ex(('$(HOST)', $(PORT))) != 0; s.close(); \
		ok or sys.exit('port $(PORT) on $(HOST) is in use (another make demo, or TensorBoard, serves there): stop it, or run make demo PORT=6007. Nothing was retrained.')"
	rm -rf runs/digits runs/digits_lr0.05 runs/digits_lr0.6 runs/bias
	$(PY) examples/digits.py --logdir runs/digits_lr0.05 --lr 0.05 --epochs 4 --captures 45
	$(PY) examples/digits.py --logdir runs/digits_lr0.6 --lr 0.6 --epochs 4 --captures 45
	$(PY) examples/bias.py --logdir runs/bias
	@echo ""
	@echo "Xray tab, the lr=0.6 run's health matrix and findings next to the lr=0.05 run's: http://$(HOST):$(PORT)/#xray&p.xray.run=digits_lr0.6,digits_lr0.05&p.xray.view=health&p.xray.stat=dead_fraction   (Ctrl+C stops TensorBoard)"
	$(VENV)/bin/tensorboard --logdir runs --host $(HOST) --port $(PORT)

test: install browser
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow"

# The peers the benches compare with (wandb offline) come with the bench extra.
bench: install
	$(PIP) install -q -c constraints.txt -e '.[bench]'
	$(PY) bench/bench_trace.py
	$(PY) bench/bench_overhead.py
	$(PY) bench/bench_tab.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache runs
