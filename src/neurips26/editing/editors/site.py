"""The edit site (one MLP output projection), its keys and the target values an edit must write."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence

import torch

from neurips26.common.checks import check_float, check_int
from neurips26.editing.editors.requests import TokenizedRequest, _batch, tokenize_request


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

    def __init__(
        self,
        model: torch.nn.Module,
        layer: int,
        module_template: str = "model.layers.{}.mlp.down_proj",
        transpose: bool | None = None,
    ):
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

    def keys_of(self, **inputs) -> torch.Tensor:
        """The site's input (B, L, d_k) for one forward pass of ``model(**inputs)``, stopped at the site.

        The layers after the site and the output head are never run (on Gemma-3-270M the 262k-token
        head alone costs more than all its blocks), and the recorded keys are the same tensor a full
        forward pass would record: nothing before the site depends on what comes after it.
        """
        store: list[torch.Tensor] = []

        def hook(_m, args):
            store.append(args[0])
            raise _StopAtSite

        handle = self.module.register_forward_pre_hook(hook)
        try:
            self.model(**inputs)
        except _StopAtSite:
            pass
        finally:
            handle.remove()
        if not store:
            raise RuntimeError(f"the forward pass never reached the edit site {self.path!r}")
        return store[0]

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


class _StopAtSite(Exception):
    """Raised by :meth:`EditSite.keys_of`'s hook to end a forward pass once the keys are recorded."""


def _logits_at(model: torch.nn.Module, positions: torch.Tensor, **inputs) -> torch.Tensor:
    """Logits ``[b, positions[b, j]]`` (B, J, V) of ``model(**inputs)``, the head run only where needed.

    Models whose ``forward`` takes ``logits_to_keep`` (transformers causal LMs) get the (B, J) positions,
    so the output head (262k rows on Gemma-3) runs on J positions per row instead of all. The body runs
    unchanged and the head is applied row by row, so the kept logits equal the full pass's within float32
    rounding of the head's ``d``-term dot products (``d eps32 sum_k |h_k W_vk|``, tested): the head's GEMM
    has another shape, which may pick another CPU kernel (it does on an AVX2 AMD EPYC), so the equality
    is not bit for bit. Other models run in full.
    """
    positions = positions.long()
    per_row = positions.view(positions.shape[0], -1)  # (B, J)
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        # a (B, J) integer tensor keeps J positions per row (transformers' slice_logits_to_keep)
        logits = model(**inputs, logits_to_keep=per_row).logits
    else:
        logits = model(**inputs).logits
        logits = logits[
            torch.arange(per_row.shape[0], device=logits.device)[:, None], per_row.to(logits.device)
        ]
    return logits.view(*positions.shape, logits.shape[-1])


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _prefix_list(prefixes: Sequence[Sequence[int]] | None) -> list[tuple[int, ...]]:
    if prefixes is None:
        return [()]
    out = [tuple(int(t) for t in p) for p in prefixes]
    if not out:
        raise ValueError("prefixes must be None or a non-empty list of token-id sequences")
    return out


def _prefixed_rows(requests, pre: list[tuple[int, ...]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """Every (request, prefix) row, request-major, and the position of its last subject token."""
    rows, pos = [], []
    for r in requests:
        for p in pre:
            rows.append(p + r.prompt_ids)
            pos.append(len(p) + r.subject_last)
    return rows, pos


def compute_keys(
    site: EditSite, requests: Sequence[TokenizedRequest], prefixes: Sequence[Sequence[int]] | None = None
) -> torch.Tensor:
    """Keys of the requests: the site's input at the last subject token, averaged over prefixes.

    .. math:: k(x) = \\frac{1}{P}\\sum_{p} \\mathrm{in}_\\ell(p \\oplus x)_{\\text{last subject token}}

    Returns
    -------
    Tensor, shape (d_k, n), float64
    """
    requests = [tokenize_request(r) for r in requests]
    pre = _prefix_list(prefixes)
    rows, pos = _prefixed_rows(requests, pre)
    ids, mask = _batch(rows)
    device = _device(site.model)
    with torch.no_grad():
        keys = site.keys_of(input_ids=ids.to(device), attention_mask=mask.to(device))
    keys = keys[torch.arange(len(rows)), torch.tensor(pos)].double().cpu()
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
            ref = torch.log_softmax(
                _logits_at(model, ess_pos, input_ids=ess_ids, attention_mask=ess_mask).float(), -1
            )
        v_norm2 = v.pow(2).sum(1).clamp_min(1e-12).float()  # (n,)
        delta = torch.zeros(n, site.d_v, dtype=torch.float32, device=device, requires_grad=True)
        opt = torch.optim.Adam([delta], lr=lr)
        for _ in range(steps):
            with site.add_to_output(delta[owner_t], sub_pos_t):
                logits = _logits_at(model, tpos, input_ids=ids, attention_mask=mask)
            logp = torch.log_softmax(logits.float(), -1)  # (rows, width, V)
            tok = logp.gather(-1, tids[..., None])[..., 0]  # (rows, width)
            nll_row = -(tok * tmask).sum(1) / tmask.sum(1)
            nll = torch.zeros(n, device=device).index_add(0, owner_t, nll_row) / P
            loss = nll + weight_decay * delta.pow(2).sum(1) / v_norm2
            if kl_factor > 0:
                with site.add_to_output(delta, ess_pos):
                    ess_logits = _logits_at(model, ess_pos, input_ids=ess_ids, attention_mask=ess_mask)
                ess_logp = torch.log_softmax(ess_logits.float(), -1)
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
