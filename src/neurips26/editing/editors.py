"""Locate-then-edit knowledge editors (ROME, MEMIT, AlphaEdit) for any ``transformers`` causal LM.

The three editors treat one MLP output projection (``down_proj`` in Llama/Qwen2/Gemma, ``c_proj`` as
a GPT-2 ``Conv1D``) as a linear key -> value memory :math:`W \\in \\mathbb{R}^{d_v \\times d_k}` and
write a fact with a closed-form low-rank update computed from keys :math:`K` (the projection's input
at the last subject token), residuals :math:`R` (what the output must additionally carry for the new
object to be predicted) and the uncentred key second moment :math:`C_0 = \\mathbb{E}[k k^\\top]` of
generic text.

* ROME -- Meng et al., "Locating and Editing Factual Associations in GPT", NeurIPS 2022 (arXiv 2202.05262).
* MEMIT -- Meng et al., "Mass-Editing Memory in a Transformer", ICLR 2023 (arXiv 2210.07229).
* AlphaEdit -- Fang et al., "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models",
  ICLR 2025 (arXiv 2410.02355).

Vocabulary follows EasyEdit: a request has ``prompt``, ``subject``, ``target_new`` and
``ground_truth``. Metrics (see :func:`edit_metrics`):

* *reliability* -- teacher-forced token accuracy of ``target_new`` on the edited prompt;
* *generalization* -- the same on paraphrases (here: other templates);
* *portability* -- the same on prompts that need the fact indirectly (here: another language);
* *locality* -- fraction of unrelated prompts whose top-1 next token is unchanged by the edit.

Every editor returns an :class:`EditUpdate` with :math:`\\Delta W = R\\,\\Phi`, the factorisation that
the cross-lingual gap decomposition relies on. :func:`apply_update` adds it in place and returns a
handle whose :meth:`UndoHandle.revert` restores the weight bit-exactly.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from neurips26.common.checks import check_float, check_int

__all__ = [
    "EditRequest",
    "TokenizedRequest",
    "tokenize_request",
    "EditSite",
    "EditUpdate",
    "UndoHandle",
    "estimate_key_moment",
    "compute_keys",
    "compute_target_values",
    "rome_update",
    "memit_update",
    "null_space_projector",
    "alphaedit_update",
    "apply_update",
    "memit_multilayer",
    "edit_metrics",
    "top1_next_tokens",
]


# --------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class EditRequest:
    """One fact edit in EasyEdit's vocabulary.

    Parameters
    ----------
    prompt : str or sequence of int
        The text (or token ids) whose continuation should become ``target_new``; it contains the subject.
    subject : str or (int, int)
        The subject as a substring of ``prompt``, or as a half-open token span ``(start, end)`` when
        ``prompt`` is token ids.
    target_new : str, int or sequence of int
        The new object. Strings get a leading space when the prompt does not end in one (as ROME does).
    ground_truth : str, int, sequence of int, optional
        The old object (used by the ``p(new) > p(old)`` metric).
    """

    prompt: str | Sequence[int]
    subject: str | tuple[int, int]
    target_new: str | int | Sequence[int]
    ground_truth: str | int | Sequence[int] | None = None


@dataclass(frozen=True)
class TokenizedRequest:
    """A request in token ids: ``prompt_ids``, index ``subject_last`` of the last subject token in it,
    ``target_ids`` (new object) and ``truth_ids`` (old object, may be empty)."""

    prompt_ids: tuple[int, ...]
    subject_last: int
    target_ids: tuple[int, ...]
    truth_ids: tuple[int, ...] = ()


def _encode(tokenizer: Any, text: str, bos: bool) -> list[int]:
    if tokenizer is None:
        raise ValueError("tokenizer is required when a request holds strings")
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos and bos_id is not None:
        ids = [bos_id, *ids]
    return ids


def _as_ids(name: str, value: Any, tokenizer: Any, prompt: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, bool):
        raise TypeError(f"{name} must be str, int or a sequence of int, got bool")
    if isinstance(value, int):
        return (value,)
    if isinstance(value, str):
        text = value if (isinstance(prompt, str) and prompt.endswith(" ")) or value.startswith(" ") else " " + value
        ids = _encode(tokenizer, text, bos=False)
        if not ids:
            raise ValueError(f"{name} {value!r} tokenizes to nothing")
        return tuple(ids)
    ids = tuple(int(t) for t in value)
    if not ids:
        raise ValueError(f"{name} must not be empty")
    return ids


def tokenize_request(request: EditRequest | TokenizedRequest, tokenizer: Any = None) -> TokenizedRequest:
    """Turn an :class:`EditRequest` into token ids and locate the last subject token.

    For string prompts the subject's last token is the last token of ``tokenize(prompt[:end of
    subject])`` (ROME's convention); a BOS token is prepended when the tokenizer has one.

    Raises
    ------
    ValueError
        When the subject does not occur in the prompt, or the span lies outside the prompt.
    """
    if isinstance(request, TokenizedRequest):
        return request
    if not isinstance(request, EditRequest):
        raise TypeError(f"request must be an EditRequest, got {type(request).__name__}")
    prompt, subject = request.prompt, request.subject
    if isinstance(prompt, str):
        if not isinstance(subject, str):
            raise TypeError("subject must be a str when prompt is a str")
        at = prompt.find(subject)
        if not subject or at < 0:
            raise ValueError(f"subject {subject!r} not found in prompt {prompt!r}")
        prompt_ids = _encode(tokenizer, prompt, bos=True)
        head = _encode(tokenizer, prompt[: at + len(subject)], bos=True)
        last = len(head) - 1
    else:
        prompt_ids = [int(t) for t in prompt]
        if not (isinstance(subject, tuple) and len(subject) == 2):
            raise TypeError("subject must be a (start, end) token span when prompt is token ids")
        start, end = subject
        if not (0 <= start < end <= len(prompt_ids)):
            raise ValueError(f"subject span {subject} not found in a prompt of {len(prompt_ids)} tokens")
        last = end - 1
    if not 0 <= last < len(prompt_ids):
        raise ValueError(f"subject {subject!r} not found in prompt {prompt!r}")
    return TokenizedRequest(
        tuple(prompt_ids),
        last,
        _as_ids("target_new", request.target_new, tokenizer, prompt),
        _as_ids("ground_truth", request.ground_truth, tokenizer, prompt),
    )


# ------------------------------------------------------------------------------------------ site
class EditSite:
    """An edit location: the linear module ``module_template.format(layer)`` of ``model``.

    Parameters
    ----------
    model : torch.nn.Module
        Any ``transformers`` causal LM (or module tree holding the path).
    layer : int
        Layer index (checked against ``config.num_hidden_layers`` when available).
    module_template : str
        Dotted path with one ``{}`` for the layer, e.g. ``"model.layers.{}.mlp.down_proj"`` (Llama,
        Qwen2, Gemma3) or ``"transformer.h.{}.mlp.c_proj"`` (GPT-2).
    transpose : bool, optional
        Whether the stored weight is (d_k, d_v) (GPT-2 ``Conv1D``); inferred when ``None``.

    Attributes
    ----------
    weight : Tensor, shape (d_v, d_k)
        A view of the module's weight in key -> value orientation (writes go to the model).
    """

    def __init__(self, model: torch.nn.Module, layer: int, module_template: str = "model.layers.{}.mlp.down_proj",
                 transpose: bool | None = None):
        check_int("layer", layer, low=0)
        if not isinstance(module_template, str) or module_template.count("{}") != 1:
            raise ValueError(f"module_template must contain exactly one '{{}}', got {module_template!r}")
        n_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        if isinstance(n_layers, int) and layer >= n_layers:
            raise ValueError(f"layer must lie in [0, {n_layers - 1}] for this model, got {layer}")
        path = module_template.format(layer)
        try:
            module = model.get_submodule(path)
        except AttributeError:
            raise ValueError(f"module path {path!r} does not exist in {type(model).__name__}") from None
        kind = type(module).__name__
        if isinstance(module, torch.nn.Linear):
            inferred = False
        elif kind == "Conv1D":
            inferred = True
        else:
            raise ValueError(f"module {path!r} must be nn.Linear or Conv1D, got {kind}")
        self.model, self.layer, self.module, self.path = model, layer, module, path
        self.module_template = module_template
        self.transpose = inferred if transpose is None else bool(transpose)

    @property
    def weight(self) -> torch.Tensor:
        w = self.module.weight
        return w.t() if self.transpose else w

    @property
    def d_k(self) -> int:
        return self.weight.shape[1]

    @property
    def d_v(self) -> int:
        return self.weight.shape[0]

    @property
    def block_prefix(self) -> str:
        """Dotted prefix of the decoder block holding the site, e.g. ``"model.layers.3."``."""
        head = self.module_template.split("{}")[0]
        return f"{head}{self.layer}."

    @contextlib.contextmanager
    def record_inputs(self) -> Iterator[list[torch.Tensor]]:
        """Collect the module's inputs (B, L, d_k) of every forward pass inside the block."""
        store: list[torch.Tensor] = []
        handle = self.module.register_forward_pre_hook(lambda _m, args: store.append(args[0]))
        try:
            yield store
        finally:
            handle.remove()

    @contextlib.contextmanager
    def add_to_output(self, delta: torch.Tensor, positions: torch.Tensor) -> Iterator[None]:
        """Add ``delta`` (d_v,) or (B, d_v) to the module output at ``positions`` (B,) of each row."""

        def hook(_m, _args, out):
            rows = torch.arange(out.shape[0], device=out.device)
            add = delta if delta.dim() == 2 else delta.expand(out.shape[0], -1)
            out = out.clone()
            out[rows, positions] = out[rows, positions] + add.to(out.dtype)
            return out

        handle = self.module.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()


def _batch(rows: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _prefix_list(prefixes: Sequence[Sequence[int]] | None) -> list[tuple[int, ...]]:
    if prefixes is None:
        return [()]
    out = [tuple(int(t) for t in p) for p in prefixes]
    if not out:
        raise ValueError("prefixes must be None or a non-empty list of token-id sequences")
    return out


# ----------------------------------------------------------------------------- key statistics
def estimate_key_moment(site: EditSite, batches: Iterable[dict], max_tokens: int = 100_000) -> torch.Tensor:
    """Uncentred second moment of the site's keys over real tokens.

    .. math:: C_0 = \\frac{1}{N}\\sum_{t=1}^{N} k_t k_t^\\top

    accumulated in float64 over the non-padding positions of ``batches`` (each a dict with
    ``input_ids`` and optional ``attention_mask``), stopping after ``max_tokens`` tokens.

    Returns
    -------
    Tensor, shape (d_k, d_k), float64
        Symmetric PSD; the mean, not the sum (so two halves average to the one-shot estimate).
    """
    check_int("max_tokens", max_tokens, low=1)
    total = torch.zeros(site.d_k, site.d_k, dtype=torch.float64)
    count = 0
    device = _device(site.model)
    with torch.no_grad(), site.record_inputs() as store:
        for batch in batches:
            if count >= max_tokens:
                break
            ids = batch["input_ids"].to(device)
            mask = batch.get("attention_mask")
            mask = torch.ones_like(ids) if mask is None else mask.to(device)
            store.clear()
            site.model(input_ids=ids, attention_mask=mask)
            keys = store[0][mask.bool()].double().cpu()
            keys = keys[: max_tokens - count]
            total += keys.T @ keys
            count += keys.shape[0]
    if count == 0:
        raise ValueError("batches held no tokens")
    return total / count


def compute_keys(site: EditSite, requests: Sequence[TokenizedRequest],
                 prefixes: Sequence[Sequence[int]] | None = None) -> torch.Tensor:
    """Keys of the requests: the site's input at the last subject token, averaged over prefixes.

    .. math:: k(x) = \\frac{1}{P}\\sum_{p} \\mathrm{in}_\\ell(p \\oplus x)_{\\text{last subject token}}

    Returns
    -------
    Tensor, shape (d_k, n), float64
    """
    requests = [tokenize_request(r) for r in requests]
    pre = _prefix_list(prefixes)
    rows, pos = [], []
    for r in requests:
        for p in pre:
            rows.append(p + r.prompt_ids)
            pos.append(len(p) + r.subject_last)
    ids, mask = _batch(rows)
    device = _device(site.model)
    with torch.no_grad(), site.record_inputs() as store:
        site.model(input_ids=ids.to(device), attention_mask=mask.to(device))
    keys = store[0][torch.arange(len(rows)), torch.tensor(pos)].double().cpu()
    return keys.view(len(requests), len(pre), -1).mean(1).T.contiguous()


def compute_target_values(
    site: EditSite,
    requests: Sequence[TokenizedRequest],
    prefixes: Sequence[Sequence[int]] | None = None,
    steps: int = 25,
    lr: float = 0.5,
    kl_factor: float = 0.0625,
    weight_decay: float = 0.5,
    clamp_norm_factor: float = 4.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ROME's value optimisation: the output shift that makes ``target_new`` the continuation.

    For each request separately, find :math:`\\delta \\in \\mathbb{R}^{d_v}` added to the site's output
    at the last subject token (of every prefixed prompt) minimising

    .. math:: -\\log p(o^* \\mid x) + \\lambda_{KL}\\,\\mathrm{KL}(p_0(\\cdot\\mid s)\\,\\|\\,p_\\delta(\\cdot\\mid s))
              + \\lambda_{wd} \\frac{\\lVert\\delta\\rVert^2}{\\lVert v\\rVert^2},
              \\qquad \\lVert\\delta\\rVert \\le c\\,\\lVert v\\rVert,

    where :math:`s` is the prompt cut after the subject ("essence" drift) and :math:`v = W k` the
    current value. Adam, deterministic (starts from zero).

    Returns
    -------
    (values, residuals) : Tensors, shape (d_v, n), float64
        :math:`v^* = v + \\delta` and :math:`r = v^* - W k = \\delta` (``W k`` is the mean output
        over prefixes, so the residual is exactly the optimised shift).
    """
    check_int("steps", steps, low=0)
    check_float("lr", lr, 0.0, low_open=True)
    check_float("kl_factor", kl_factor, 0.0)
    check_float("weight_decay", weight_decay, 0.0)
    check_float("clamp_norm_factor", clamp_norm_factor, 0.0, low_open=True)
    requests = [tokenize_request(r) for r in requests]
    pre = _prefix_list(prefixes)
    model, device = site.model, _device(site.model)
    params = list(model.parameters())
    flags = [p.requires_grad for p in params]
    if any(not r.target_ids for r in requests):
        raise ValueError("every request needs a non-empty target_new")
    # All requests are optimised jointly: the loss is a sum of per-request terms and Adam is
    # elementwise, so this equals optimising each request on its own (one batch instead of n).
    n, P = len(requests), len(pre)
    rows, sub_pos, tgt_pos, tgt_ids, owner = [], [], [], [], []
    for i, r in enumerate(requests):
        for p in pre:
            rows.append(p + r.prompt_ids + r.target_ids[:-1])
            sub_pos.append(len(p) + r.subject_last)
            start = len(p) + len(r.prompt_ids) - 1
            tgt_pos.append([start + j for j in range(len(r.target_ids))])
            tgt_ids.append(list(r.target_ids))
            owner.append(i)
    width = max(len(t) for t in tgt_ids)
    tmask = torch.tensor([[1.0] * len(t) + [0.0] * (width - len(t)) for t in tgt_ids], device=device)
    tpos = torch.tensor([t + [t[-1]] * (width - len(t)) for t in tgt_pos], device=device)
    tids = torch.tensor([t + [t[-1]] * (width - len(t)) for t in tgt_ids], device=device)
    ids, mask = _batch(rows)
    ids, mask = ids.to(device), mask.to(device)
    sub_pos_t = torch.tensor(sub_pos, device=device)
    owner_t = torch.tensor(owner, device=device)
    ess_rows = [r.prompt_ids[: r.subject_last + 1] for r in requests]
    ess_ids, ess_mask = _batch(ess_rows)
    ess_ids, ess_mask = ess_ids.to(device), ess_mask.to(device)
    ess_pos = torch.tensor([len(e) - 1 for e in ess_rows], device=device)
    row_idx = torch.arange(len(rows), device=device)
    try:
        for p in params:
            p.requires_grad_(False)
        with torch.no_grad(), site.record_inputs() as store:
            model(input_ids=ids, attention_mask=mask)
            out = site.module(store[0][row_idx, sub_pos_t]).double()
            v = out.view(n, P, -1).mean(1)  # (n, d_v)
            ref = torch.log_softmax(model(input_ids=ess_ids, attention_mask=ess_mask).logits[
                torch.arange(n, device=device), ess_pos].float(), -1)
        v_norm2 = v.pow(2).sum(1).clamp_min(1e-12).float()  # (n,)
        delta = torch.zeros(n, site.d_v, dtype=torch.float32, device=device, requires_grad=True)
        opt = torch.optim.Adam([delta], lr=lr)
        for _ in range(steps):
            with site.add_to_output(delta[owner_t], sub_pos_t):
                logits = model(input_ids=ids, attention_mask=mask).logits
            logp = torch.log_softmax(logits[row_idx[:, None], tpos].float(), -1)  # (rows, width, V)
            tok = logp.gather(-1, tids[..., None])[..., 0]  # (rows, width)
            nll_row = -(tok * tmask).sum(1) / tmask.sum(1)
            nll = torch.zeros(n, device=device).index_add(0, owner_t, nll_row) / P
            loss = nll + weight_decay * delta.pow(2).sum(1) / v_norm2
            if kl_factor > 0:
                with site.add_to_output(delta, ess_pos):
                    ess_logits = model(input_ids=ess_ids, attention_mask=ess_mask).logits
                ess_logp = torch.log_softmax(ess_logits[torch.arange(n, device=device), ess_pos].float(), -1)
                kl = torch.sum(ref.exp() * (ref - ess_logp), -1)
                loss = loss + kl_factor * kl
            opt.zero_grad()
            loss.sum().backward()
            opt.step()
            with torch.no_grad():
                limit = clamp_norm_factor * v_norm2.sqrt()
                norm = delta.norm(dim=1)
                scale = torch.where(norm > limit, limit / norm.clamp_min(1e-30), torch.ones_like(norm))
                delta.mul_(scale[:, None])
        d = delta.detach().double().cpu()
        values, residuals = (v.cpu() + d).T.contiguous(), d.T.contiguous()
    finally:
        for p, f in zip(params, flags):
            p.requires_grad_(f)
    return values, residuals


# ------------------------------------------------------------------------------------ updates
@dataclass
class EditUpdate:
    """A closed-form edit :math:`\\Delta W = R\\,\\Phi`.

    Attributes
    ----------
    delta_W : Tensor, shape (d_v, d_k), float64
    R_s : Tensor, shape (d_v, n)
        Source residuals the update was computed from.
    Phi : Tensor, shape (n, d_k)
        Key-side factor; ``delta_W == R_s @ Phi`` up to rounding.
    K_s : Tensor, shape (d_k, n)
        The keys it was computed for.
    method : str
    """

    delta_W: torch.Tensor
    R_s: torch.Tensor
    Phi: torch.Tensor
    K_s: torch.Tensor
    method: str
    info: dict = field(default_factory=dict)


def _check_kr(K: torch.Tensor, R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(K, torch.Tensor) or not isinstance(R, torch.Tensor):
        raise TypeError("K and R must be tensors")
    if K.dim() == 1:
        K = K[:, None]
    if R.dim() == 1:
        R = R[:, None]
    if K.dim() != 2 or R.dim() != 2 or K.shape[1] != R.shape[1]:
        raise ValueError(f"K (d_k, n) and R (d_v, n) must share n, got K {tuple(K.shape)} and R {tuple(R.shape)}")
    return K.double(), R.double()


def _check_c0(C0: torch.Tensor, d_k: int) -> torch.Tensor:
    if not isinstance(C0, torch.Tensor) or C0.shape != (d_k, d_k):
        got = tuple(C0.shape) if isinstance(C0, torch.Tensor) else type(C0).__name__
        raise ValueError(f"C0 must be a ({d_k}, {d_k}) tensor, got {got}")
    C0 = C0.double()
    if not torch.allclose(C0, C0.T, rtol=1e-8, atol=1e-10 * float(C0.abs().max().clamp_min(1e-300))):
        raise ValueError("C0 must be symmetric")
    return C0


def _chol(C0: torch.Tensor, jitter: float) -> torch.Tensor:
    d = C0.shape[0]
    eps = jitter * float(torch.trace(C0)) / d
    L, info = torch.linalg.cholesky_ex(C0 + eps * torch.eye(d, dtype=C0.dtype))
    if int(info) != 0 or not torch.isfinite(L).all():
        raise ValueError("C0 must be positive definite (after jitter); got a non-PSD or singular matrix "
                         "(raise jitter)")
    return L


def rome_update(k: torch.Tensor, r: torch.Tensor, C0: torch.Tensor, jitter: float = 1e-6) -> EditUpdate:
    """ROME's rank-one update.

    .. math:: u = \\frac{C_0^{-1} k}{k^\\top C_0^{-1} k}, \\qquad \\Delta W = r\\,u^\\top,

    so that :math:`(W + \\Delta W) k = W k + r` exactly and the update is minimal in the
    :math:`C_0`-weighted norm.

    Parameters
    ----------
    k : Tensor, shape (d_k,)
    r : Tensor, shape (d_v,)
    C0 : Tensor, shape (d_k, d_k)
    jitter : float
        Cholesky jitter relative to ``tr(C0)/d_k`` (``0`` allowed when C0 is definite).
    """
    check_float("jitter", jitter, 0.0)
    K, R = _check_kr(k, r)
    if K.shape[1] != 1:
        raise ValueError(f"rome_update edits one fact: k must be (d_k,), got {tuple(k.shape)}")
    C0 = _check_c0(C0, K.shape[0])
    L = _chol(C0, jitter)
    c_inv_k = torch.cholesky_solve(K, L)  # (d_k, 1)
    denom = float(K[:, 0] @ c_inv_k[:, 0])
    if denom <= 0:
        raise ValueError("k must be non-zero")
    Phi = (c_inv_k / denom).T
    return EditUpdate(R @ Phi, R, Phi, K, "rome")


def memit_update(K: torch.Tensor, R: torch.Tensor, C0: torch.Tensor, lam: float = 1e2,
                 jitter: float = 1e-6) -> EditUpdate:
    """MEMIT's batch update at one layer.

    .. math:: \\Delta W = R K^\\top (\\lambda C_0 + K K^\\top)^{-1}
              = R\\,(\\lambda I + K^\\top C_0^{-1} K)^{-1} K^\\top C_0^{-1}

    (the right form, by the Woodbury identity, solves an n x n system and also holds at
    :math:`\\lambda = 0`, where one fact gives exactly ROME's update).

    Parameters
    ----------
    K : Tensor, shape (d_k, n)
    R : Tensor, shape (d_v, n)
    C0 : Tensor, shape (d_k, d_k)
    lam : float
        ``mom2_update_weight`` (>= 0).
    """
    check_float("lam", lam, 0.0)
    check_float("jitter", jitter, 0.0)
    K, R = _check_kr(K, R)
    C0 = _check_c0(C0, K.shape[0])
    L = _chol(C0, jitter)
    c_inv_K = torch.cholesky_solve(K, L)  # (d_k, n)
    gram = K.T @ c_inv_K
    gram = 0.5 * (gram + gram.T) + lam * torch.eye(K.shape[1], dtype=K.dtype)
    Phi = torch.linalg.solve(gram, c_inv_K.T)  # (n, d_k)
    return EditUpdate(R @ Phi, R, Phi, K, "memit", {"lam": lam})


def null_space_projector(C0: torch.Tensor, eps: float = 1e-2) -> torch.Tensor:
    """AlphaEdit's projector onto the (approximate) null space of preserved keys.

    .. math:: C_0 = U \\Lambda U^\\top,\\quad P = \\hat U \\hat U^\\top,\\quad
              \\hat U = \\{u_i : \\lambda_i < \\varepsilon\\,\\lambda_{\\max}\\}

    Returns
    -------
    Tensor, shape (d_k, d_k), float64; an orthogonal projector.
    """
    check_float("eps", eps, 0.0)
    if not isinstance(C0, torch.Tensor) or C0.dim() != 2:
        raise ValueError("C0 must be a square (d_k, d_k) tensor")
    C0 = _check_c0(C0, C0.shape[0])
    evals, evecs = torch.linalg.eigh(0.5 * (C0 + C0.T))
    keep = evals < eps * evals.max()
    U = evecs[:, keep]
    return U @ U.T


def alphaedit_update(K: torch.Tensor, R: torch.Tensor, C0: torch.Tensor | None = None,
                     K_prev: torch.Tensor | None = None, eps: float = 1e-2, l2: float = 1.0,
                     P: torch.Tensor | None = None) -> EditUpdate:
    """AlphaEdit's null-space constrained update.

    .. math:: \\Delta W = R K^\\top P\\,\\big((K_p K_p^\\top + K K^\\top) P + \\lambda_2 I\\big)^{-1}

    with :math:`P` from :func:`null_space_projector`. For every key :math:`k_0` with
    :math:`P k_0 = 0` (the preserved-key subspace) :math:`\\Delta W k_0 = 0` exactly.

    Parameters
    ----------
    K : Tensor, shape (d_k, n)
    R : Tensor, shape (d_v, n)
    C0 : Tensor, shape (d_k, d_k), optional
        Needed when ``P`` is not given.
    K_prev : Tensor, shape (d_k, m), optional
        Keys of previously applied edits (sequential editing).
    eps : float
        Relative eigenvalue threshold of the null space.
    l2 : float
        Ridge term (AlphaEdit's ``L2``; > 0).
    P : Tensor, shape (d_k, d_k), optional
        Precomputed projector.
    """
    check_float("l2", l2, 0.0, low_open=True)
    K, R = _check_kr(K, R)
    d_k = K.shape[0]
    if P is None:
        if C0 is None:
            raise ValueError("alphaedit_update needs C0 or P")
        P = null_space_projector(_check_c0(C0, d_k), eps)
    elif P.shape != (d_k, d_k):
        raise ValueError(f"P must be ({d_k}, {d_k}), got {tuple(P.shape)}")
    P = P.double()
    A = K @ K.T
    if K_prev is not None:
        Kp = K_prev.double()
        if Kp.dim() != 2 or Kp.shape[0] != d_k:
            raise ValueError(f"K_prev must be ({d_k}, m), got {tuple(K_prev.shape)}")
        A = A + Kp @ Kp.T
    M = A @ P + l2 * torch.eye(d_k, dtype=K.dtype)
    # Phi = K^T P M^{-1}  <=>  M^T Phi^T = P K
    Phi = torch.linalg.solve(M.T, P @ K).T
    return EditUpdate(R @ Phi, R, Phi, K, "alphaedit", {"null_dim": int(round(float(torch.trace(P))))})


class UndoHandle:
    """Restores the edited weight bit-exactly (a saved copy, not a subtraction)."""

    def __init__(self, site: EditSite, saved: torch.Tensor):
        self.site, self._saved, self.active = site, saved, True

    def revert(self) -> None:
        if self.active:
            with torch.no_grad():
                self.site.module.weight.copy_(self._saved)
            self.active = False

    def __enter__(self) -> UndoHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.revert()


def apply_update(site: EditSite, update: EditUpdate | torch.Tensor, alpha: float = 1.0) -> UndoHandle:
    """Add ``alpha * delta_W`` to the site's weight in place; return an :class:`UndoHandle`."""
    check_float("alpha", alpha)
    delta = update.delta_W if isinstance(update, EditUpdate) else update
    if tuple(delta.shape) != (site.d_v, site.d_k):
        raise ValueError(f"delta_W must be ({site.d_v}, {site.d_k}) for {site.path}, got {tuple(delta.shape)}")
    saved = site.module.weight.detach().clone()
    with torch.no_grad():
        w = site.weight
        w.add_((alpha * delta).to(dtype=w.dtype, device=w.device))
    return UndoHandle(site, saved)


# -------------------------------------------------------------------------- multi-layer MEMIT
def _stream_at(model, block_path: str, requests, prefixes) -> torch.Tensor:
    """Residual stream (block output) at the last subject token, mean over prefixes: (d_v, n)."""
    block = model.get_submodule(block_path)
    pre = _prefix_list(prefixes)
    rows, pos = [], []
    for r in requests:
        for p in pre:
            rows.append(p + r.prompt_ids)
            pos.append(len(p) + r.subject_last)
    store = []
    handle = block.register_forward_hook(lambda _m, _a, out: store.append(out[0] if isinstance(out, tuple) else out))
    ids, mask = _batch(rows)
    try:
        with torch.no_grad():
            model(input_ids=ids.to(_device(model)), attention_mask=mask.to(_device(model)))
    finally:
        handle.remove()
    h = store[0][torch.arange(len(rows)), torch.tensor(pos)].double().cpu()
    return h.view(len(requests), len(pre), -1).mean(1).T


def memit_multilayer(
    model: torch.nn.Module,
    requests: Sequence[TokenizedRequest],
    layers: Sequence[int],
    C0s: dict[int, torch.Tensor],
    module_template: str = "model.layers.{}.mlp.down_proj",
    lam: float = 1e2,
    prefixes: Sequence[Sequence[int]] | None = None,
    residuals: torch.Tensor | None = None,
    **value_kwargs: Any,
) -> tuple[list[tuple[EditSite, EditUpdate]], list[UndoHandle]]:
    """MEMIT spread over several layers (applied in place, in layer order).

    The target :math:`z_i = h_L(x_i) + \\delta_i` is optimised at the last layer :math:`L`; at layer
    :math:`\\ell` (the j-th of m) the residual is :math:`(z_i - h_L^{cur}(x_i)) / (m - j)` where
    :math:`h_L^{cur}` is the residual stream at the last layer's output with the earlier layers
    already edited. With one layer this is :func:`memit_update`.

    Returns
    -------
    (updates, handles)
        ``[(site, update)]`` per layer and the undo handles (revert in reverse order).
    """
    layers = list(layers)
    if not layers or sorted(set(layers)) != layers:
        raise ValueError(f"layers must be a non-empty strictly increasing list, got {layers}")
    requests = [tokenize_request(r) for r in requests]
    missing = [ell for ell in layers if ell not in C0s]
    if missing:
        raise KeyError(f"C0s lacks layers {missing}")
    last_site = EditSite(model, layers[-1], module_template)
    block_path = last_site.block_prefix.rstrip(".")
    if residuals is None:
        _, residuals = compute_target_values(last_site, requests, prefixes, **value_kwargs)
    z = _stream_at(model, block_path, requests, prefixes) + residuals.double()
    updates, handles = [], []
    try:
        for j, ell in enumerate(layers):
            site = EditSite(model, ell, module_template)
            cur = _stream_at(model, block_path, requests, prefixes)
            R = (z - cur) / (len(layers) - j)
            K = compute_keys(site, requests, prefixes)
            upd = memit_update(K, R, C0s[ell], lam=lam)
            handles.append(apply_update(site, upd))
            updates.append((site, upd))
    except BaseException:
        for h in reversed(handles):
            h.revert()
        raise
    return updates, handles


# ------------------------------------------------------------------------------------- metrics
def top1_next_tokens(model: torch.nn.Module, prompts: Sequence[Sequence[int]], batch_size: int = 256) -> torch.Tensor:
    """Greedy next token after each prompt (right-padded batches): (n,) long."""
    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            chunk = [list(p) for p in prompts[i : i + batch_size]]
            ids, mask = _batch(chunk)
            logits = model(input_ids=ids.to(_device(model)), attention_mask=mask.to(_device(model))).logits
            last = mask.sum(1) - 1
            out.append(logits[torch.arange(len(chunk)), last.to(logits.device)].argmax(-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)


def edit_metrics(model: torch.nn.Module, requests: Sequence[TokenizedRequest], batch_size: int = 256) -> dict[str, torch.Tensor]:
    """Teacher-forced edit metrics per request (EasyEdit's definitions).

    Returns
    -------
    dict of Tensor, shape (n,)
        ``token_acc``: fraction of ``target_ids`` tokens that are the argmax under teacher forcing
        (EasyEdit's reliability / portability score); ``success``: 1 when all are; ``new_gt_old``: 1
        when :math:`\\log p(\\text{target\\_new}) > \\log p(\\text{ground\\_truth})` (NaN without one);
        ``logp_new``: sequence log-probability of ``target_new``.
    """
    requests = [tokenize_request(r) for r in requests]
    res = {k: [] for k in ("token_acc", "success", "new_gt_old", "logp_new")}

    def seq_scores(rows_tgt):
        rows = [p + t[:-1] for p, t in rows_tgt]
        ids, mask = _batch(rows)
        with torch.no_grad():
            logits = model(input_ids=ids.to(_device(model)), attention_mask=mask.to(_device(model))).logits
        accs, lps = [], []
        for i, (p, t) in enumerate(rows_tgt):
            pos = torch.arange(len(p) - 1, len(p) - 1 + len(t))
            tt = torch.tensor(t)
            logp = torch.log_softmax(logits[i, pos.to(logits.device)].float(), -1).cpu()  # only the needed rows
            accs.append((logp.argmax(-1) == tt).double().mean())
            lps.append(logp[torch.arange(len(t)), tt].double().sum())
        return torch.stack(accs), torch.stack(lps)

    for i in range(0, len(requests), batch_size):
        chunk = requests[i : i + batch_size]
        acc, lp = seq_scores([(list(r.prompt_ids), list(r.target_ids)) for r in chunk])
        res["token_acc"].append(acc)
        res["success"].append((acc == 1).double())
        res["logp_new"].append(lp)
        has_old = [r for r in chunk if r.truth_ids]
        cmp = torch.full((len(chunk),), float("nan"), dtype=torch.float64)
        if has_old:
            _, lp_old = seq_scores([(list(r.prompt_ids), list(r.truth_ids)) for r in has_old])
            idx = torch.tensor([j for j, r in enumerate(chunk) if r.truth_ids])
            cmp[idx] = (lp[idx] > lp_old).double()
        res["new_gt_old"].append(cmp)
    return {k: torch.cat(v) for k, v in res.items()}


def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of one call (used by the claim's performance numbers)."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start

