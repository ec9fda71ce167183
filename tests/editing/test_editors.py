"""Tests for the locate-then-edit editors (ROME, MEMIT, AlphaEdit) on tiny config-built models."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neurips26.common.models import build_tiny_lm
from neurips26.editing.editors import (
    EditRequest,
    EditSite,
    TokenizedRequest,
    alphaedit_update,
    apply_update,
    compute_keys,
    compute_target_values,
    edit_metrics,
    estimate_key_moment,
    memit_multilayer,
    memit_update,
    null_space_projector,
    rome_update,
    tokenize_request,
    top1_next_tokens,
)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    m = build_tiny_lm("llama", vocab_size=40, seed=0, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    m.eval()
    return m


def _random_C0(d, seed=0, n=400):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(0.1, 2.0, d, dtype=torch.float64)
    return X.T @ X / n


def _requests():
    return [TokenizedRequest((1, 5, 6, 7, 8), 2, (9,), (10,)), TokenizedRequest((1, 11, 12, 13), 2, (14, 15), (16,))]


def test_rome_constraint_exact_and_rank_one():
    d_k, d_v = 24, 12
    C0 = _random_C0(d_k)
    g = torch.Generator().manual_seed(1)
    W = torch.randn(d_v, d_k, dtype=torch.float64, generator=g)
    k = torch.randn(d_k, dtype=torch.float64, generator=g)
    v_star = torch.randn(d_v, dtype=torch.float64, generator=g)
    upd = rome_update(k, v_star - W @ k, C0, jitter=0.0)
    W_new = W + upd.delta_W
    assert torch.linalg.norm(W_new @ k - v_star) / torch.linalg.norm(v_star) < 1e-10
    assert torch.linalg.matrix_rank(upd.delta_W) == 1
    assert torch.allclose(upd.delta_W, upd.R_s @ upd.Phi)
    # minimal in the C0 metric: any other rank-one solution r w^T with w^T k = 1 costs more
    cost = lambda D: torch.trace(D @ C0 @ D.T)  # noqa: E731
    w = torch.randn(d_k, dtype=torch.float64, generator=g)
    other = torch.outer(v_star - W @ k, w / (w @ k))
    assert cost(upd.delta_W) <= cost(other) + 1e-12


def test_rome_update_on_model_restores_value(model):
    site = EditSite(model, 0)
    reqs = _requests()[:1]
    K = compute_keys(site, reqs)
    C0 = estimate_key_moment(site, [{"input_ids": torch.randint(4, 40, (4, 12), generator=torch.Generator().manual_seed(0))}])
    target = torch.randn(site.d_v, dtype=torch.float64)
    upd = rome_update(K[:, 0], target, C0)
    before = (site.weight.double() @ K[:, 0]).clone()
    with apply_update(site, upd):
        after = site.weight.double() @ K[:, 0]
        assert torch.linalg.norm(after - before - target) / torch.linalg.norm(target) < 1e-4


def test_memit_one_fact_zero_lambda_equals_rome():
    d_k, d_v = 16, 8
    C0 = _random_C0(d_k, seed=3)
    g = torch.Generator().manual_seed(2)
    k, r = torch.randn(d_k, dtype=torch.float64, generator=g), torch.randn(d_v, dtype=torch.float64, generator=g)
    a = rome_update(k, r, C0, jitter=0.0).delta_W
    b = memit_update(k[:, None], r[:, None], C0, lam=0.0, jitter=0.0).delta_W
    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_memit_fits_keys_at_small_lambda_and_shrinks_with_lambda():
    d_k, d_v, n = 20, 10, 5
    C0 = _random_C0(d_k, seed=4)
    g = torch.Generator().manual_seed(5)
    K, R = torch.randn(d_k, n, dtype=torch.float64, generator=g), torch.randn(d_v, n, dtype=torch.float64, generator=g)
    upd = memit_update(K, R, C0, lam=0.0, jitter=0.0)
    assert torch.allclose(upd.delta_W @ K, R, atol=1e-9)
    norms = [float(memit_update(K, R, C0, lam=lam).delta_W.norm()) for lam in (0.0, 0.1, 1.0, 10.0, 100.0)]
    assert all(a > b for a, b in zip(norms, norms[1:]))


def test_alphaedit_orthogonal_to_preserved_keys():
    d_k, d_v, n = 24, 10, 4
    C0 = _random_C0(d_k, seed=6)
    evals, evecs = torch.linalg.eigh(C0)
    P = null_space_projector(C0, eps=0.2)
    assert torch.allclose(P @ P, P, atol=1e-10) and torch.allclose(P, P.T)
    g = torch.Generator().manual_seed(7)
    K, R = torch.randn(d_k, n, dtype=torch.float64, generator=g), torch.randn(d_v, n, dtype=torch.float64, generator=g)
    upd = alphaedit_update(K, R, C0, eps=0.2, l2=0.5)
    top = evecs[:, evals >= 0.2 * evals.max()]
    keys = top @ torch.randn(top.shape[1], 6, dtype=torch.float64, generator=g)
    rel = (upd.delta_W @ keys).norm(dim=0) / (upd.delta_W.norm() * keys.norm(dim=0))
    assert rel.max() < 1e-10
    assert torch.allclose(upd.delta_W, upd.R_s @ upd.Phi)


def test_alphaedit_previous_keys_also_protected():
    d_k, d_v = 12, 6
    C0 = torch.eye(d_k, dtype=torch.float64)  # null space with eps>1: everything
    g = torch.Generator().manual_seed(8)
    K = torch.randn(d_k, 2, dtype=torch.float64, generator=g)
    Kp = torch.randn(d_k, 3, dtype=torch.float64, generator=g)
    R = torch.randn(d_v, 2, dtype=torch.float64, generator=g)
    free = alphaedit_update(K, R, C0, eps=2.0, l2=1e-3)
    seq = alphaedit_update(K, R, C0, K_prev=Kp, eps=2.0, l2=1e-3)
    assert (seq.delta_W @ Kp).norm() < (free.delta_W @ Kp).norm()


def test_apply_and_revert_bit_exact(model):
    site = EditSite(model, 1)
    original = model.state_dict()
    original = {k: v.clone() for k, v in original.items()}
    handle = apply_update(site, torch.randn(site.d_v, site.d_k, dtype=torch.float64))
    assert not torch.equal(site.module.weight, original["model.layers.1.mlp.down_proj.weight"])  # same kernel: n/a, asserts a difference
    handle.revert()
    for k, v in model.state_dict().items():
        assert torch.equal(v, original[k]), k  # same kernel: revert copies the saved weight back


def test_key_moment_halves_average_and_psd(model):
    site = EditSite(model, 0)
    g = torch.Generator().manual_seed(3)
    b1 = {"input_ids": torch.randint(4, 40, (3, 10), generator=g)}
    b2 = {"input_ids": torch.randint(4, 40, (3, 10), generator=g)}
    whole = estimate_key_moment(site, [b1, b2])
    halves = 0.5 * (estimate_key_moment(site, [b1]) + estimate_key_moment(site, [b2]))
    assert torch.allclose(whole, halves, atol=1e-12)
    assert torch.allclose(whole, whole.T)
    assert torch.linalg.eigvalsh(whole).min() > -1e-10
    # padding is skipped
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[:, 7:] = 0
    short = estimate_key_moment(site, [{"input_ids": b1["input_ids"][:, :7]}])
    padded = estimate_key_moment(site, [{"input_ids": b1["input_ids"], "attention_mask": mask}])
    assert torch.allclose(short, padded, atol=1e-6)


def test_value_optimisation_makes_target_top1(model):
    # a random tiny model barely routes a shift to later positions: edit the subject at the prompt's end
    site = EditSite(model, 0)
    reqs = [TokenizedRequest((1, 5, 6, 7), 3, (9,), (10,)), TokenizedRequest((1, 11, 12), 2, (14,), (16,))]
    _, R = compute_target_values(site, reqs, steps=60, lr=0.5, kl_factor=0.0, weight_decay=0.0, clamp_norm_factor=1e4)
    K = compute_keys(site, reqs)
    C0 = estimate_key_moment(site, [{"input_ids": torch.randint(4, 40, (8, 12), generator=torch.Generator().manual_seed(0))}])
    before = edit_metrics(model, reqs)
    with apply_update(site, memit_update(K, R, C0, lam=0.0)):
        after = edit_metrics(model, reqs)
    assert after["success"].mean() == 1.0
    assert after["logp_new"].gt(before["logp_new"]).all()
    # reverted: the saved weights are restored bit for bit, then the same forward runs again
    assert torch.equal(edit_metrics(model, reqs)["logp_new"], before["logp_new"])  # same kernel


def test_memit_multilayer_single_layer_equals_memit(model):
    reqs = _requests()
    g = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(4, 40, (8, 12), generator=g)}]
    C0s = {ell: estimate_key_moment(EditSite(model, ell), batches) for ell in (0, 1)}
    R = torch.randn(32, 2, dtype=torch.float64, generator=g) * 0.1
    ups, handles = memit_multilayer(model, reqs, [1], C0s, lam=1.0, residuals=R)
    for h in reversed(handles):
        h.revert()
    site = EditSite(model, 1)
    ref = memit_update(compute_keys(site, reqs), R, C0s[1], lam=1.0)
    assert torch.allclose(ups[0][1].delta_W, ref.delta_W, atol=1e-9)
    ups2, handles2 = memit_multilayer(model, reqs, [0, 1], C0s, lam=1.0, residuals=R)
    assert [s.layer for s, _ in ups2] == [0, 1]
    for h in reversed(handles2):
        h.revert()


def test_top1_padded_batch_matches_single(model):
    prompts = [[1, 5, 6], [1, 7, 8, 9, 10]]
    batched = top1_next_tokens(model, prompts)
    single = torch.cat([top1_next_tokens(model, [p]) for p in prompts])
    # Padded and single rows run different GEMM shapes, so their logits agree only to rounding; the argmax
    # is portable when each row's top-2 gap exceeds twice that rounding.
    # bound: |logit_batched - logit_single| <= L * (d + d_ff + T) * eps32 * max|logit|
    cfg = model.config
    with torch.no_grad():
        logits = torch.stack([model(input_ids=torch.tensor([p])).logits[0, -1] for p in prompts])
    n = cfg.num_hidden_layers * (cfg.hidden_size + cfg.intermediate_size + max(map(len, prompts)))
    bound = n * torch.finfo(torch.float32).eps * float(logits.abs().max())
    top2 = logits.topk(2, dim=-1).values
    assert ((top2[:, 0] - top2[:, 1]) > 2 * bound).all()  # no near-tie: the tokens cannot flip on any CPU
    assert torch.equal(batched, single)  # same kernel: integer tokens, guarded by the margin check above


class _WordTok:
    bos_token_id = 1

    def __init__(self):
        self.vocab = {}

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab.setdefault(w, 4 + len(self.vocab)) for w in text.split()]}


def test_tokenize_request_strings_and_errors():
    tok = _WordTok()
    r = tokenize_request(EditRequest("The capital of France is", "France", "Rome", "Paris"), tok)
    assert r.prompt_ids[0] == 1 and r.subject_last == 4 and len(r.target_ids) == 1
    with pytest.raises(ValueError, match="subject"):
        tokenize_request(EditRequest("The capital of France is", "Spain", "Rome"), tok)
    with pytest.raises(ValueError, match="subject span"):
        tokenize_request(EditRequest([1, 2, 3], (2, 5), 4))


def test_bad_inputs(model):
    with pytest.raises(ValueError, match="does not exist"):
        EditSite(model, 0, "model.layers.{}.mlp.nope")
    with pytest.raises(ValueError, match="layer must lie"):
        EditSite(model, 5)
    with pytest.raises(ValueError, match="nn.Linear or Conv1D"):
        EditSite(model, 0, "model.layers.{}.mlp")
    with pytest.raises(ValueError, match="share n"):
        memit_update(torch.randn(8, 3), torch.randn(4, 2), torch.eye(8))
    with pytest.raises(ValueError, match="positive definite"):
        rome_update(torch.randn(4), torch.randn(3), -torch.eye(4), jitter=0.0)
    with pytest.raises(ValueError, match="symmetric"):
        memit_update(torch.randn(4, 1), torch.randn(3, 1), torch.triu(torch.ones(4, 4)))
    with pytest.raises(ValueError, match="delta_W"):
        apply_update(EditSite(model, 0), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="lam"):
        memit_update(torch.randn(4, 1), torch.randn(3, 1), torch.eye(4), lam=-1.0)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), lam=st.floats(0.0, 10.0), seed=st.integers(0, 10_000))
def test_memit_factorisation_property(n, lam, seed):
    g = torch.Generator().manual_seed(seed)
    d_k, d_v = 10, 7
    C0 = _random_C0(d_k, seed=seed)
    K, R = torch.randn(d_k, n, dtype=torch.float64, generator=g), torch.randn(d_v, n, dtype=torch.float64, generator=g)
    upd = memit_update(K, R, C0, lam=lam, jitter=0.0)
    assert torch.allclose(upd.delta_W, upd.R_s @ upd.Phi)
    # normal equations of  min ||dW K - R||^2 + lam tr(dW C0 dW^T)
    grad = (upd.delta_W @ K - R) @ K.T + lam * upd.delta_W @ C0
    assert grad.abs().max() < 1e-6 * (1 + R.abs().max() * K.abs().max() ** 2)


def test_joint_value_optimisation_equals_per_request(model):
    site = EditSite(model, 0)
    reqs = _requests()
    pre = [[2], [2, 7]]
    kw = dict(steps=5, lr=0.1, kl_factor=0.0625, weight_decay=0.5, clamp_norm_factor=4.0)
    V, R = compute_target_values(site, reqs, pre, **kw)
    for i, r in enumerate(reqs):
        Vi, Ri = compute_target_values(site, [r], pre, **kw)
        assert torch.allclose(R[:, i], Ri[:, 0], atol=1e-5)
        assert torch.allclose(V[:, i], Vi[:, 0], atol=1e-5)


def test_keys_of_stops_at_site_and_equals_full_pass(model):
    """The truncated pass records the same keys as a full forward pass, and never runs later layers."""
    site = EditSite(model, 0)
    ids = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0]])
    mask = (ids != 0).long()
    mask[:, 0] = 1
    with torch.no_grad(), site.record_inputs() as store:
        model(input_ids=ids, attention_mask=mask)
    later = []
    handle = model.model.layers[1].register_forward_pre_hook(lambda _m, a: later.append(1))
    try:
        with torch.no_grad():
            keys = site.keys_of(input_ids=ids, attention_mask=mask)
    finally:
        handle.remove()
    assert torch.equal(keys, store[0]) and later == []  # same kernel: the same layers on the same batch
    # the keys of compute_keys are the full pass's keys at the last subject token; compute_keys pads the
    # requests into one batch, the reference runs each alone (other GEMM shapes, so other kernels).
    # bound: |k_batched - k_single| <= (site layer + 1) * (d + d_ff + T) * eps32 * max|k|
    reqs = _requests()
    k = compute_keys(site, reqs)
    cfg = model.config
    eps = torch.finfo(torch.float32).eps
    n = (site.layer + 1) * (cfg.hidden_size + cfg.intermediate_size + max(len(r.prompt_ids) for r in reqs))
    for i, r in enumerate(reqs):
        with torch.no_grad(), site.record_inputs() as st_:
            model(input_ids=torch.tensor([r.prompt_ids]))
        ref = st_[0][0, r.subject_last].double()
        torch.testing.assert_close(k[:, i], ref, rtol=0.0, atol=n * eps * float(ref.abs().max()))


def test_logits_at_equals_full_logits(model):
    from neurips26.editing.editors.site import _logits_at

    ids = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 11, 12]])
    pos = torch.tensor([[1, 3, 3], [4, 0, 2]])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        full, hidden = out.logits, out.hidden_states[-1]  # hidden: the final-normed states the head reads
        got = _logits_at(model, pos, input_ids=ids)
        last = _logits_at(model, torch.tensor([4, 2]), input_ids=ids)
    # The body runs on the same shapes (the same kernels); only the output head's GEMM has another shape
    # (J rows instead of T), so another CPU kernel may sum each logit's d terms in another order.
    # bound: |logit_kept - logit_full| <= d * eps32 * sum_k |h_k| |W_vk|, elementwise (d = hidden size)
    head = model.get_output_embeddings().weight
    d, eps = head.shape[1], torch.finfo(torch.float32).eps
    assert torch.allclose(hidden @ head.t(), full, rtol=0, atol=1e-5)  # the head reads these states
    scale = d * eps * (hidden.abs() @ head.abs().t())
    rows, ends = torch.arange(2), torch.tensor([4, 2])
    assert ((got - full[rows[:, None], pos]).abs() <= scale[rows[:, None], pos]).all()
    assert ((last - full[rows, ends]).abs() <= scale[rows, ends]).all()
