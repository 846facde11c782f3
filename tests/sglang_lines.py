"""SGLang decode log lines, one per format generation, as each version prints it."""

GENERATIONS = {
    "0.4.1.post7-0.4.6": (
        "Decode batch. #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "gen throughput (token/s): 61.23, #queue-req: 0"
    ),
    "0.4.6.post4+ cuda graph": (
        "Decode batch. #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0"
    ),
    "0.4.10+ trailing comma": (
        "Decode batch. #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0, "
    ),
    "0.5.3.post3+ accept rate": (
        "Decode batch. #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "accept rate: 0.51, cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0, "
    ),
    "0.5.4 iteration number": (
        "Decode batch [48213], #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "accept rate: 0.51, cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0, "
    ),
    "0.5.4.post1+ comma": (
        "Decode batch, #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "accept rate: 0.51, cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0, "
    ),
    "0.5.9+ no trailing comma": (
        "Decode batch, #running-req: 1, #token: 1523, token usage: 0.01, accept len: 2.05, "
        "accept rate: 0.51, cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0"
    ),
    "later extra fields anywhere": (
        "Decode batch, #retracted-req: 0, #running-req: 1, cap len: 4096, #token: 1523, token usage: 0.01, "
        "accept len: 2.05, accept rate: 0.51, pre-allocated usage: 0.00, #prealloc-req: 0, "
        "#transfer-req: 0, cuda graph: False, gen throughput (token/s): 61.23, #queue-req: 0, new thing: x"
    ),
}
