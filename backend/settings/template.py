"""The config file `specdeck config init` writes, and the one a first save starts from: every key optional,
the operator's set-up written out with comments.
"""

INIT_TEMPLATE = """\
# specdeck configuration. Every key is optional: what you leave out keeps the built-in default.
# Validate with `specdeck config show`.

# The host `specdeck` (and the TUI) uses when --host is not given.
default_host = "gpu-box"

# The target model's folder on the host.
target = "/data/models/Kimi-K2.5"

[hosts.gpu-box]
url = "ssh://root@10.1.230.174"        # ssh://user@addr[:port]; ~/.ssh/config (ProxyJump, IdentityFile) applies
python = "/root/ml-env/bin/python3"    # the host's interpreter (runs the agent, sglang, huggingface_hub)
workdir = "/data/eagle3"               # specdeck keeps its state under <workdir>/.specdeck
# identity = "~/.ssh/id_ed25519"
# known_hosts = "~/.ssh/known_hosts"

[drafters.ours]
path = "/data/eagle3/output_100k_sglang/4"

[drafters.aq-medai]
repo = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
files = ["config.json", "model.safetensors"]
path = "/data/eagle3/aq_medai_k2"

[profiles.baseline]
tp = 8
port = 30000

[profiles.eagle3-ours]
drafter = "ours"
algorithm = "EAGLE3"
steps = 3
topk = 1
draft_tokens = 4

[profiles.eagle3-aq]
drafter = "aq-medai"
algorithm = "EAGLE3"
steps = 3
topk = 1
draft_tokens = 4
# extra_args = ["--mem-fraction-static", "0.85"]
# env = { SGLANG_ENABLE_SPEC_V2 = "1" }   # SGLang 0.5.6 only: 0.5.23 overlaps by default and ignores it

[reference]
baseline_tok_s = 82   # measured tok/s without speculation, one stream
cycle_ms = 30         # one verify cycle; break-even accept length = cycle × baseline = 2.46
# gpu_hour_usd = 3.5  # one GPU's price per hour: costs per million tokens in dollars (else GPU-seconds)
"""
