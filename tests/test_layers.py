"""Fast paths of the building blocks equal their plain definitions: the fused q|k|v projection,
the CPU inference path of the output projection (and its cache invalidation), old checkpoints."""
import torch
import torch.nn.functional as F

from atnat.models.layers import MultiHeadAttention, OutputProjection


def test_fused_self_attention_equals_separate_query_and_memory_projections():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2).eval()
    x = torch.randn(3, 5, 16)
    fused, _ = attn(x, x)  # one (3D, D) matmul
    separate, _ = attn(x, x.clone())  # not the same tensor: q and k|v projected apart
    torch.testing.assert_close(fused, separate)
    q, k, v = attn.project_qkv(x)
    torch.testing.assert_close(q, attn.project_q(x))
    torch.testing.assert_close(torch.stack([k, v]), torch.stack(attn.project_kv(x)))


def test_checkpoints_with_separate_q_and_kv_projections_still_load():
    torch.manual_seed(0)
    new = MultiHeadAttention(16, 2).eval()
    d = 16
    old_keys = {"q_proj.weight": new.in_weight[:d], "q_proj.bias": new.in_bias[:d],
                "kv_proj.weight": new.in_weight[d:], "kv_proj.bias": new.in_bias[d:],
                "out_proj.weight": new.out_proj.weight, "out_proj.bias": new.out_proj.bias}
    loaded = MultiHeadAttention(16, 2).eval()
    loaded.load_state_dict({k: v.detach().clone() for k, v in old_keys.items()})
    x = torch.randn(2, 4, 16)
    torch.testing.assert_close(loaded(x, x)[0], new(x, x)[0])


def test_output_projection_inference_path_matches_linear_and_follows_weight_changes():
    torch.manual_seed(0)
    proj = OutputProjection(8, 50).eval()
    x = torch.randn(4, 3, 8)
    with torch.no_grad():
        torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias))
        assert proj._cache is not None  # the transposed copy was used
        proj.weight.add_(1.0)  # in place, as an optimizer step does
        torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias))
        proj.load_state_dict({"weight": torch.zeros(50, 8), "bias": torch.ones(50)})
        assert torch.equal(proj(x), torch.ones(4, 3, 50))
        proj.weight = torch.nn.Parameter(torch.full((50, 8), 2.0))  # a new tensor (its address may be reused)
        torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias))
        proj.weight.data = torch.ones(50, 8)  # same tensor, new storage, no version bump
        torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias))
    with torch.inference_mode():
        fresh = OutputProjection(8, 50).eval()  # parameters are inference tensors here
        torch.testing.assert_close(fresh(x), F.linear(x, fresh.weight, fresh.bias))
        fresh.load_state_dict({"weight": torch.ones(50, 8), "bias": torch.zeros(50)})  # in place, no version
        torch.testing.assert_close(fresh(x), F.linear(x, fresh.weight, fresh.bias))
    out = proj.train()(x)  # training: the plain differentiable path
    out.sum().backward()
    assert proj.weight.grad is not None


def test_output_projection_cache_follows_a_fused_optimizer_step():
    """A fused AdamW (train.step: fused, compiled) updates the weight in place without bumping its version
    counter: the validation after such steps multiplied by the weights of the validation before."""
    torch.manual_seed(0)
    proj = OutputProjection(8, 50)
    x = torch.randn(4, 3, 8)
    opt = torch.optim.AdamW(proj.parameters(), lr=0.1, fused=True)
    for _ in range(2):  # validation, training steps, validation: what a training loop does
        with torch.inference_mode():
            torch.testing.assert_close(proj.eval()(x), F.linear(x, proj.weight, proj.bias))
        proj.train()
        for _ in range(3):
            opt.zero_grad()
            proj(x).square().mean().backward()
            opt.step()


def test_attention_over_keys_that_are_all_masked_reads_nothing_on_every_path():
    from atnat.models.layers import MultiHeadAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    q, k, v = torch.randn(2, 4, 3, 4), torch.randn(2, 4, 5, 4), torch.randn(2, 4, 5, 4)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1] = False  # the second sentence's source is empty
    sdpa, _ = attn.attend(q, k, v, mask=mask)
    explicit, weights = attn.attend(q, k, v, mask=mask, need_weights=True)
    fused = attn.attend_fused(q, k, v, mask)
    for out in (explicit, fused):
        torch.testing.assert_close(out, sdpa)
    assert torch.equal(weights[1], torch.zeros_like(weights[1])) and torch.isfinite(weights).all()
