"""TinyAgent in PyTorch eager, timed the way `benches/policy_speed.rs` times the Rust model.

The same architecture as `agentrl::tinyagent` (learned positions, pre-LN
blocks with a fused QKV projection, GELU MLP, a final LayerNorm and a head tied
to the token embedding), the same shape (the base model's), 64-bit weights,
one thread. It measures

* decoding: B prompts of PROMPT tokens, then NEW tokens sampled one at a time
  from the full distribution (temperature 1, top-p 1) with a KV cache written
  in place, each sampled token's log-probability kept, as the policy does;
* a training step: the forward pass of B_TRAIN rows of T_TRAIN tokens, the
  head, log-probabilities and entropy at the action tokens only, a
  policy-gradient loss, the backward pass and an AdamW step.

Each measurement is the median of REPEATS runs after a warm-up, printed as
`parameters n`, `decode B tokens_per_second` and `train_step seconds` lines that `cargo xtask
perf` reads. Run it with the project's venv and the book's environment
(`ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1`), as `cargo xtask perf` does.
"""

import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

VOCAB, N_CTX, D, LAYERS, HEADS = 1024, 768, 64, 2, 4
PROMPT, NEW = 96, 256
B_TRAIN, T_TRAIN = 16, 256
REPEATS = 7


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.ln2 = torch.nn.LayerNorm(D)
        self.up = torch.nn.Linear(D, 4 * D)
        self.down = torch.nn.Linear(4 * D, D)

    def forward(self, x, cache=None, filled=0):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        if cache is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            keys, values = cache
            keys[:, :, filled : filled + t] = k
            values[:, :, filled : filled + t] = v
            k, v = keys[:, :, : filled + t], values[:, :, : filled + t]
            # One new query sees every cached key; a prompt is causal.
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyAgent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, D)
        self.wpe = torch.nn.Embedding(N_CTX, D)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = torch.nn.LayerNorm(D)

    def hidden(self, ids, start=0, caches=None):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(start, start + t))
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], start)
        return self.ln_f(x)

    def head(self, hidden):
        return hidden @ self.wte.weight.T

    @torch.no_grad()
    def generate(self, prompts, new, generator):
        b, t = prompts.shape
        shape = (b, HEADS, t + new, D // HEADS)
        caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in self.blocks]  # keys, values
        logits = self.head(self.hidden(prompts, 0, caches)[:, -1])  # [B, V]
        tokens, logprobs = [], []
        for step in range(new):
            logp = logits.log_softmax(-1)
            token = torch.multinomial(logp.exp(), 1, generator=generator)  # [B, 1]
            tokens.append(token)
            logprobs.append(logp.gather(-1, token))
            if step + 1 == new:
                break
            logits = self.head(self.hidden(token, t + step, caches)[:, -1])
        return torch.cat(tokens, 1), torch.cat(logprobs, 1)


def train_step(model, opt, ids, mask, advantages):
    hidden = model.hidden(ids)  # [B, T, D]
    rows, before = mask[:, 1:].nonzero(as_tuple=True)  # the position before each action token
    log_probs = model.head(hidden[rows, before]).log_softmax(-1)  # [N, V]
    logp = log_probs.gather(-1, ids[rows, before + 1].unsqueeze(-1)).squeeze(-1)  # [N]
    entropy = -(log_probs.exp() * log_probs).sum(-1)  # [N]
    loss = -(advantages[rows, before + 1] * logp).sum() / mask.sum() - 0.001 * entropy.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def median_time(run):
    run()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    model = TinyAgent()
    for p in model.parameters():
        if p.dim() == 2:  # embeddings and projections, as TinyAgent draws them
            torch.nn.init.normal_(p, 0.0, 0.02)
    print(f"pytorch {torch.__version__}, {torch.get_num_threads()} thread, capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"parameters {sum(p.numel() for p in model.parameters())}")
    for b in (1, 8, 32):
        prompts = (torch.arange(PROMPT).unsqueeze(0) * 13 + 7 + torch.arange(b).unsqueeze(1)) % VOCAB
        generator = torch.Generator().manual_seed(0)
        seconds = median_time(lambda: model.generate(prompts, NEW, generator))
        print(f"decode {b} {b * NEW / seconds:.1f}")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    ids = (torch.arange(T_TRAIN).unsqueeze(0) * 31 + 5 * torch.arange(B_TRAIN).unsqueeze(1)) % VOCAB
    position = torch.arange(T_TRAIN).unsqueeze(0) + torch.arange(B_TRAIN).unsqueeze(1)
    mask = (position % 7 == 3) & (torch.arange(T_TRAIN) > 0)
    advantages = torch.where(torch.arange(B_TRAIN) % 2 == 0, 1.0, -1.0).unsqueeze(1).expand(B_TRAIN, T_TRAIN) * mask
    seconds = median_time(lambda: train_step(model, opt, ids, mask, advantages))
    print(f"train_step {seconds:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
