"""kiln.site without a GPU or torch: the one-site sources written from a
SiteSpec are, byte for byte, the ones Kiln wrote before specs existed (the
digest of the text names each cached package, so those packages stay valid
and compile to the same PTX), for sites from fusion reports and for
kiln.transformers' dense and paged sites; the specs' cache labels are the
old directory names; the transformers constructors refuse what no kernel
serves."""

import pytest

import kiln
from kiln.site import Operand, SiteSpec, package_source

#: Sites of kilnc's reports on test/tools/kilnc/Inputs/fusion (what the
#: spec reads of them), with their sources.
REPORT_SITES = [
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': -3.4028234663852886e+38, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'bias': {'dtype': 'f32', 'shape': [2, 4, 1, 8]}, 'mask': {'dtype': 'i1', 'shape': [2, 1, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xi1>, %b: tensor<?x?x?x?xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) bias(%b : tensor<?x?x?x?xf32>) {causal, masked_score = -3.4028234663852886e+38 : f32, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='alibi_bloom_padding'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'f32', 'shape': [1, 4, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xf32>) {causal, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='alibi_causal'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bshd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, layout = #kiln.layout<bshd>, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_3d_gqa'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'i1', 'shape': [1, 1, 8, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xi1>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_bool_mask'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_causal'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'i1', 'shape': [1, 1, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xi1>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {causal, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_causal_padding_bool'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': -3.4028234663852886e+38, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'i1', 'shape': [1, 1, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xi1>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {causal, masked_score = -3.4028234663852886e+38 : f32, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_causal_padding_min'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'i1', 'shape': [4, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?xi1>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?xi1>) {scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_causal_rect'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'f32', 'shape': [1, 1, 8, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xf32>) {scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_float_mask'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.125, 'softcap': None, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_scale'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': 30, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {scale = 0.25 : f32, softcap = 30.0 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='attn23_softcap'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': 1, 'window_right': 7, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {scale = 0.25 : f32, window = 1 : i64, window_right = 7 : i64} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='causal_anti'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': -3.4028234663852886e+38, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, masked_score = -3.4028234663852886e+38 : f32, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='causal_compare_large_batch2'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': -3.4028234663852886e+38, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'i1', 'shape': [1, 1, 2560, 2560]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xi1>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {masked_score = -3.4028234663852886e+38 : f32, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='causal_compare_large_strict'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'bias': {'dtype': 'f32', 'shape': [1, 1, 8, 8]}, 'mask': {'dtype': 'f32', 'shape': [1, 1, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xf32>, %b: tensor<?x?x?x?xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xf32>) bias(%b : tensor<?x?x?x?xf32>) {scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='causal_pad_add_add'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bshd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {layout = #kiln.layout<bshd>, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='einsum_bshd'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': -3.4028234663852886e+38, 'scale': 0.25, 'softcap': None, 'window': 3, 'window_right': 2, 'operands': {'mask': {'dtype': 'f32', 'shape': [1, 1, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xf32>) {masked_score = -3.4028234663852886e+38 : f32, scale = 0.25 : f32, window = 3 : i64, window_right = 2 : i64} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='local_window_padding'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bshd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'mask': {'dtype': 'f32', 'shape': [1, 1, 1, 8]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %m: tensor<?x?x?x?xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xf32>) {layout = #kiln.layout<bshd>, scale = 0.25 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='mask_hf_padding'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 24, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.20412415266036987, 'softcap': None, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x24xf32>, %k: tensor<?x?x?x24xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.20412415266036987 : f32} : tensor<?x?x?x24xf32>, tensor<?x?x?x24xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='mla_head_dims'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': False, 'layout': 'bhsd', 'masked_score': None, 'scale': 1, 'softcap': None, 'window': None, 'window_right': None, 'operands': {'scale_factor': {'dtype': 'f32', 'shape': [1, 1, 1, 1]}}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>, %f: tensor<1x1x1x1xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v scale_factor(%f : tensor<1x1x1x1xf32>) {scale = 1.0 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='scale_input'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': 50, 'window': None, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.25 : f32, softcap = 50.0 : f32} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='softcap_gemma2'),
    pytest.param(
        {'dtype': 'f32', 'head_dim': 16, 'v_head_dim': 16, 'causal': True, 'layout': 'bhsd', 'masked_score': None, 'scale': 0.25, 'softcap': None, 'window': 3, 'window_right': None, 'operands': {}},
        (
        'func.func @attention(%q: tensor<?x?x?x16xf32>, %k: tensor<?x?x?x16xf32>, %v: tensor<?x?x?x16xf32>) -> tensor<?x?x?x16xf32> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.25 : f32, window = 3 : i64} : tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32>, tensor<?x?x?x16xf32> -> tensor<?x?x?x16xf32>\n'
        '  return %o : tensor<?x?x?x16xf32>\n'
        '}\n'),
        id='window_built'),
]


@pytest.mark.parametrize("site, text", REPORT_SITES)
def test_report_sites_keep_their_source(site, text) -> None:
    assert package_source(SiteSpec.from_report(site)) == text


#: kiln.transformers' dense sites: (dtype, head dim, value dim, kind,
#: window, softcap, scale), their cache label and source.
DENSE_SITES = [
    pytest.param(
        ('bf16', 64, 64, 'causal', None, None, 0.125), 'bf16_d64_causal',
        (
        'func.func @attention(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>\n'
        '  return %o : tensor<?x?x?x64xbf16>\n'
        '}\n'),
        id='bf16_d64_causal'),
    pytest.param(
        ('f16', 128, 128, 'none', None, None, 0.08838834764831845), 'f16_d128_none',
        (
        'func.func @attention(%q: tensor<?x?x?x128xf16>, %k: tensor<?x?x?x128xf16>, %v: tensor<?x?x?x128xf16>) -> tensor<?x?x?x128xf16> {\n'
        '  %o = kiln.attention %q, %k, %v {scale = 0.08838834764831845 : f32} : tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16>, tensor<?x?x?x128xf16> -> tensor<?x?x?x128xf16>\n'
        '  return %o : tensor<?x?x?x128xf16>\n'
        '}\n'),
        id='f16_d128_none'),
    pytest.param(
        ('bf16', 64, 64, 'mask', None, None, 0.125), 'bf16_d64_mask',
        (
        'func.func @attention(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>, %m: tensor<?x?x?x?xi1>) -> tensor<?x?x?x64xbf16> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>\n'
        '  return %o : tensor<?x?x?x64xbf16>\n'
        '}\n'),
        id='bf16_d64_mask'),
    pytest.param(
        ('f32', 64, 96, 'mask', None, 30.0, 0.125), 'f32_d64_mask_softcap30.0',
        (
        'func.func @attention(%q: tensor<?x?x?x64xf32>, %k: tensor<?x?x?x64xf32>, %v: tensor<?x?x?x96xf32>, %m: tensor<?x?x?x?xi1>) -> tensor<?x?x?x96xf32> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xi1>) {scale = 0.125 : f32, softcap = 30.0 : f32} : tensor<?x?x?x64xf32>, tensor<?x?x?x64xf32>, tensor<?x?x?x96xf32> -> tensor<?x?x?x96xf32>\n'
        '  return %o : tensor<?x?x?x96xf32>\n'
        '}\n'),
        id='f32_d64_mask_softcap30.0'),
    pytest.param(
        ('bf16', 64, 64, 'causal', 512, 50.0, 0.125), 'bf16_d64_causal_window512_softcap50.0',
        (
        'func.func @attention(%q: tensor<?x?x?x64xbf16>, %k: tensor<?x?x?x64xbf16>, %v: tensor<?x?x?x64xbf16>) -> tensor<?x?x?x64xbf16> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32, softcap = 50.0 : f32, window = 512 : i64} : tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16>, tensor<?x?x?x64xbf16> -> tensor<?x?x?x64xbf16>\n'
        '  return %o : tensor<?x?x?x64xbf16>\n'
        '}\n'),
        id='bf16_d64_causal_window512_softcap50.0'),
    pytest.param(
        ('f16', 256, 256, 'causal', 4096, None, 0.0625), 'f16_d256_causal_window4096',
        (
        'func.func @attention(%q: tensor<?x?x?x256xf16>, %k: tensor<?x?x?x256xf16>, %v: tensor<?x?x?x256xf16>) -> tensor<?x?x?x256xf16> {\n'
        '  %o = kiln.attention %q, %k, %v {causal, scale = 0.0625 : f32, window = 4096 : i64} : tensor<?x?x?x256xf16>, tensor<?x?x?x256xf16>, tensor<?x?x?x256xf16> -> tensor<?x?x?x256xf16>\n'
        '  return %o : tensor<?x?x?x256xf16>\n'
        '}\n'),
        id='f16_d256_causal_window4096'),
    pytest.param(
        ('bf16', 80, 80, 'none', None, 1e-05, 1.0), 'bf16_d80_none_softcap1e-05',
        (
        'func.func @attention(%q: tensor<?x?x?x80xbf16>, %k: tensor<?x?x?x80xbf16>, %v: tensor<?x?x?x80xbf16>) -> tensor<?x?x?x80xbf16> {\n'
        '  %o = kiln.attention %q, %k, %v {scale = 1.0 : f32, softcap = 1e-05 : f32} : tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16> -> tensor<?x?x?x80xbf16>\n'
        '  return %o : tensor<?x?x?x80xbf16>\n'
        '}\n'),
        id='bf16_d80_none_softcap1e-05'),
]


@pytest.mark.parametrize("fields, label, text", DENSE_SITES)
def test_dense_sites_keep_their_source_and_label(fields, label, text) -> None:
    dtype, head_dim, value_dim, kind, window, softcap, scale = fields
    spec = SiteSpec.dense(dtype, head_dim, value_dim, scale,
                          causal=kind == "causal", mask=kind == "mask",
                          window=window, softcap=softcap)
    assert package_source(spec) == text
    assert spec.label == label


#: kiln.transformers' paged sites: (dtype, head dim, value dim, page size,
#: window, FP8 KV heads, ragged, scale), their cache label and source.
PAGED_SITES = [
    pytest.param(
        ('bf16', 64, 64, 16, None, None, False, 0.125), 'bf16_d64_paged16',
        (
        'func.func @attention(%q: tensor<?x?x?x64xbf16>, %kc: tensor<?x16x?x64xbf16>, %vc: tensor<?x16x?x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x?x?x64xbf16> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x?x?x64xbf16>\n'
        '  return %o : tensor<?x?x?x64xbf16>\n'
        '}\n'),
        id='bf16_d64_paged16'),
    pytest.param(
        ('bf16', 64, 64, 16, 32, None, False, 0.125), 'bf16_d64_paged16_window32',
        (
        'func.func @attention(%q: tensor<?x?x?x64xbf16>, %kc: tensor<?x16x?x64xbf16>, %vc: tensor<?x16x?x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x?x?x64xbf16> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, window = 32 : i64, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x?x?x64xbf16>\n'
        '  return %o : tensor<?x?x?x64xbf16>\n'
        '}\n'),
        id='bf16_d64_paged16_window32'),
    pytest.param(
        ('bf16', 64, 64, 16, None, 2, False, 0.125), 'bf16_d64_paged16_fp8kv2',
        (
        'func.func @attention(%q: tensor<?x?x?x64xbf16>, %kc: tensor<?x16x2x64xf8E4M3FN>, %vc: tensor<?x16x2x64xf8E4M3FN>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %ks: tensor<2xf32>, %vs: tensor<2xf32>) -> tensor<?x?x?x64xbf16> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<2xf32>, tensor<2xf32>) {causal, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, tensor<?x16x2x64xf8E4M3FN>, tensor<?x16x2x64xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x?x?x64xbf16>\n'
        '  return %o : tensor<?x?x?x64xbf16>\n'
        '}\n'),
        id='bf16_d64_paged16_fp8kv2'),
    pytest.param(
        ('f16', 128, 128, 16, 32, None, True, 0.125), 'f16_d128_paged16_window32_ragged',
        (
        'func.func @attention(%q: tensor<?x?x128xf16>, %kc: tensor<?x16x?x128xf16>, %vc: tensor<?x16x?x128xf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x?x128xf16> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, window = 32 : i64, scale = 0.125 : f32} : tensor<?x?x128xf16>, tensor<?x16x?x128xf16>, tensor<?x16x?x128xf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x?x128xf16>\n'
        '  return %o : tensor<?x?x128xf16>\n'
        '}\n'),
        id='f16_d128_paged16_window32_ragged'),
    pytest.param(
        ('bf16', 64, 128, 32, 4096, 2, True, 0.125), 'bf16_d64_paged32_window4096_fp8kv2_ragged',
        (
        'func.func @attention(%q: tensor<?x?x64xbf16>, %kc: tensor<?x32x2x64xf8E4M3FN>, %vc: tensor<?x32x2x128xf8E4M3FN>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>, %ks: tensor<2xf32>, %vs: tensor<2xf32>) -> tensor<?x?x128xbf16> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs scales(%ks, %vs : tensor<2xf32>, tensor<2xf32>) {causal, window = 4096 : i64, scale = 0.125 : f32} : tensor<?x?x64xbf16>, tensor<?x32x2x64xf8E4M3FN>, tensor<?x32x2x128xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x?x128xbf16>\n'
        '  return %o : tensor<?x?x128xbf16>\n'
        '}\n'),
        id='bf16_d64_paged32_window4096_fp8kv2_ragged'),
    pytest.param(
        ('f32', 72, 72, 8, None, None, True, 0.1), 'f32_d72_paged8_ragged',
        (
        'func.func @attention(%q: tensor<?x?x72xf32>, %kc: tensor<?x8x?x72xf32>, %vc: tensor<?x8x?x72xf32>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %offs: tensor<?xi32>) -> tensor<?x?x72xf32> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens q_offsets %offs {causal, scale = 0.1 : f32} : tensor<?x?x72xf32>, tensor<?x8x?x72xf32>, tensor<?x8x?x72xf32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x?x72xf32>\n'
        '  return %o : tensor<?x?x72xf32>\n'
        '}\n'),
        id='f32_d72_paged8_ragged'),
    pytest.param(
        ('f16', 64, 64, 64, None, 1, False, 0.125), 'f16_d64_paged64_fp8kv1',
        (
        'func.func @attention(%q: tensor<?x?x?x64xf16>, %kc: tensor<?x64x1x64xf8E4M3FN>, %vc: tensor<?x64x1x64xf8E4M3FN>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %ks: tensor<1xf32>, %vs: tensor<1xf32>) -> tensor<?x?x?x64xf16> {\n'
        '  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens scales(%ks, %vs : tensor<1xf32>, tensor<1xf32>) {causal, scale = 0.125 : f32} : tensor<?x?x?x64xf16>, tensor<?x64x1x64xf8E4M3FN>, tensor<?x64x1x64xf8E4M3FN>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x?x?x64xf16>\n'
        '  return %o : tensor<?x?x?x64xf16>\n'
        '}\n'),
        id='f16_d64_paged64_fp8kv1'),
]


@pytest.mark.parametrize("fields, label, text", PAGED_SITES)
def test_paged_sites_keep_their_source_and_label(fields, label, text) -> None:
    dtype, head_dim, value_dim, page_size, window, fp8_kv_heads, ragged, scale = fields
    spec = SiteSpec.paged(dtype, head_dim, value_dim, scale, page_size,
                          window=window, fp8_kv_heads=fp8_kv_heads, ragged=ragged)
    assert package_source(spec) == text
    assert spec.label == label


def test_specs_are_keys() -> None:
    """Equal specialisations are one key, whatever built them: the
    transformers backend's causal site is a report's causal site."""
    report = {"dtype": "bf16", "head_dim": 64, "v_head_dim": None,
              "causal": True, "layout": "bhsd", "scale": 0.125, "operands": {}}
    built = SiteSpec.dense("bf16", 64, 64, 0.125, causal=True)
    assert SiteSpec.from_report(report) == built
    assert {built: 1}[SiteSpec.dense("bf16", 64, 64, 1 / 8, causal=True)] == 1
    assert SiteSpec.dense("bf16", 64, 64, 0.125, mask=True).mask == Operand("i1", 4)
    assert not built.is_paged
    assert SiteSpec.paged("bf16", 64, 64, 0.125, 16).is_paged


def test_transformers_sites_are_checked() -> None:
    with pytest.raises(kiln.KilnError, match="needs causal"):
        SiteSpec.dense("bf16", 64, 64, 0.125, mask=True, window=512)
    with pytest.raises(kiln.KilnError, match="positive size"):
        SiteSpec.dense("bf16", 64, 64, 0.125, causal=True, window=0)
    with pytest.raises(kiln.KilnError, match="soft-cap must be positive"):
        SiteSpec.dense("bf16", 64, 64, 0.125, softcap=0.0)
    with pytest.raises(kiln.KilnError, match="must be positive"):
        SiteSpec.paged("bf16", 64, 64, 0.125, 16, window=0)
    with pytest.raises(kiln.KilnError, match="positive KV head count"):
        SiteSpec.paged("bf16", 64, 64, 0.125, 16, fp8_kv_heads=0)
    with pytest.raises(kiln.KilnError, match="multiples of 16"):
        SiteSpec.paged("bf16", 72, 72, 0.125, 16, fp8_kv_heads=2)
    with pytest.raises(kiln.KilnError, match="f16 or bf16"):
        SiteSpec.paged("f32", 64, 64, 0.125, 16, fp8_kv_heads=2)


#: kilnc's report entry of Swin-v2's cosine attention
#: (scale_per_head_cosine_f16.onnx): a logit scale per query head.
COSINE_SITE = {
    'dtype': 'f16', 'head_dim': 16, 'v_head_dim': 16, 'causal': False,
    'layout': 'bhsd', 'masked_score': None, 'scale': 1, 'softcap': None,
    'window': None, 'window_right': None, 'q_heads': 4, 'kv_heads': 4,
    'scale_factor': 'per_head',
    'operands': {'mask': {'dtype': 'f16', 'shape': [1, 4, 8, 8]},
                 'scale_factor': {'dtype': 'f32', 'shape': [4]}}}


def _kiln_opt():
    import pathlib
    import shutil
    built = pathlib.Path(__file__).resolve().parents[2] / "build" / "bin" / "kiln-opt"
    return str(built) if built.exists() else shutil.which("kiln-opt")


def _verifies(source: str) -> None:
    """The source parses and verifies (where kiln-opt is built)."""
    import subprocess
    tool = _kiln_opt()
    if tool is None:
        return
    result = subprocess.run([tool, "-", "-o", "/dev/null"], input=source,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_per_head_scale_factor_sites_have_static_heads() -> None:
    """A factor per query head is a tensor<Hq x f32> operand: the package
    fixes the query heads (and K's, so that heads not grouped keep the
    tensor-core kernels), and the spec is another key than a one-element
    factor's."""
    spec = SiteSpec.from_report(COSINE_SITE)
    assert spec.heads == (4, 4)
    assert spec.scale_factor == Operand('f32', 1)
    text = package_source(spec)
    assert text == (
        'func.func @attention(%q: tensor<?x4x?x16xf16>, %k: tensor<?x4x?x16xf16>, %v: tensor<?x4x?x16xf16>, %m: tensor<?x?x?x?xf16>, %f: tensor<4xf32>) -> tensor<?x4x?x16xf16> {\n'
        '  %o = kiln.attention %q, %k, %v mask(%m : tensor<?x?x?x?xf16>) scale_factor(%f : tensor<4xf32>) {scale = 1.0 : f32} : tensor<?x4x?x16xf16>, tensor<?x4x?x16xf16>, tensor<?x4x?x16xf16> -> tensor<?x4x?x16xf16>\n'
        '  return %o : tensor<?x4x?x16xf16>\n'
        '}\n')
    _verifies(text)
    assert spec.label == 'f16_d16_mask_heads4x4'

    one = dict(COSINE_SITE, scale_factor=True,
               operands=dict(COSINE_SITE['operands'],
                             scale_factor={'dtype': 'f32', 'shape': [1]}))
    one_spec = SiteSpec.from_report(one)
    assert one_spec.heads is None
    assert one_spec != spec and len({one_spec, spec}) == 2
    assert 'scale_factor(%f : tensor<1xf32>)' in package_source(one_spec)


def test_per_head_scale_factor_grouped_bshd() -> None:
    """bshd, grouped heads: Q and the result with the query heads on axis
    2, K and V with the KV heads; the backward's package too."""
    from kiln.site import training_source
    site = dict(COSINE_SITE, layout='bshd', q_heads=8, kv_heads=2,
                operands={'scale_factor': {'dtype': 'f32', 'shape': [8]}})
    spec = SiteSpec.from_report(site)
    text = package_source(spec)
    assert ('%q: tensor<?x?x8x16xf16>, %k: tensor<?x?x2x16xf16>, '
            '%v: tensor<?x?x2x16xf16>, %f: tensor<8xf32>) -> '
            'tensor<?x?x8x16xf16>') in text
    _verifies(text)
    training = training_source(spec)
    assert 'scale_factor(%f : tensor<8xf32>)' in training
    assert '-> (tensor<?x?x8x16xf16>, tensor<?x?x2x16xf16>, tensor<?x?x2x16xf16>)' in training
    _verifies(training)


def test_per_head_scale_factor_needs_the_heads() -> None:
    site = dict(COSINE_SITE, q_heads=None)
    with pytest.raises(ValueError, match="needs the site's head counts"):
        SiteSpec.from_report(site)
