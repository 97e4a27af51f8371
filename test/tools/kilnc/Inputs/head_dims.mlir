// Tensor-core sites of head dims 40 to 256, equal and differing (MLA).
func.func @d40(%q: tensor<?x?x?x40xbf16>, %k: tensor<?x?x?x40xbf16>, %v: tensor<?x?x?x40xbf16>) -> tensor<?x?x?x40xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x40xbf16>, tensor<?x?x?x40xbf16>, tensor<?x?x?x40xbf16> -> tensor<?x?x?x40xbf16>
  return %o : tensor<?x?x?x40xbf16>
}
func.func @d80(%q: tensor<?x?x?x80xbf16>, %k: tensor<?x?x?x80xbf16>, %v: tensor<?x?x?x80xbf16>) -> tensor<?x?x?x80xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16>, tensor<?x?x?x80xbf16> -> tensor<?x?x?x80xbf16>
  return %o : tensor<?x?x?x80xbf16>
}
func.func @d96(%q: tensor<?x?x?x96xbf16>, %k: tensor<?x?x?x96xbf16>, %v: tensor<?x?x?x96xbf16>) -> tensor<?x?x?x96xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16>, tensor<?x?x?x96xbf16> -> tensor<?x?x?x96xbf16>
  return %o : tensor<?x?x?x96xbf16>
}
func.func @d128(%q: tensor<?x?x?x128xbf16>, %k: tensor<?x?x?x128xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @d136(%q: tensor<?x?x?x136xbf16>, %k: tensor<?x?x?x136xbf16>, %v: tensor<?x?x?x136xbf16>) -> tensor<?x?x?x136xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x136xbf16>, tensor<?x?x?x136xbf16>, tensor<?x?x?x136xbf16> -> tensor<?x?x?x136xbf16>
  return %o : tensor<?x?x?x136xbf16>
}
func.func @d160(%q: tensor<?x?x?x160xbf16>, %k: tensor<?x?x?x160xbf16>, %v: tensor<?x?x?x160xbf16>) -> tensor<?x?x?x160xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x160xbf16>, tensor<?x?x?x160xbf16>, tensor<?x?x?x160xbf16> -> tensor<?x?x?x160xbf16>
  return %o : tensor<?x?x?x160xbf16>
}
func.func @d176(%q: tensor<?x?x?x176xbf16>, %k: tensor<?x?x?x176xbf16>, %v: tensor<?x?x?x176xbf16>) -> tensor<?x?x?x176xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x176xbf16>, tensor<?x?x?x176xbf16>, tensor<?x?x?x176xbf16> -> tensor<?x?x?x176xbf16>
  return %o : tensor<?x?x?x176xbf16>
}
func.func @d192(%q: tensor<?x?x?x192xbf16>, %k: tensor<?x?x?x192xbf16>, %v: tensor<?x?x?x192xbf16>) -> tensor<?x?x?x192xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16> -> tensor<?x?x?x192xbf16>
  return %o : tensor<?x?x?x192xbf16>
}
func.func @d200(%q: tensor<?x?x?x200xbf16>, %k: tensor<?x?x?x200xbf16>, %v: tensor<?x?x?x200xbf16>) -> tensor<?x?x?x200xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x200xbf16>, tensor<?x?x?x200xbf16>, tensor<?x?x?x200xbf16> -> tensor<?x?x?x200xbf16>
  return %o : tensor<?x?x?x200xbf16>
}
func.func @d224(%q: tensor<?x?x?x224xbf16>, %k: tensor<?x?x?x224xbf16>, %v: tensor<?x?x?x224xbf16>) -> tensor<?x?x?x224xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x224xbf16>, tensor<?x?x?x224xbf16>, tensor<?x?x?x224xbf16> -> tensor<?x?x?x224xbf16>
  return %o : tensor<?x?x?x224xbf16>
}
func.func @d256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x256xbf16>) -> tensor<?x?x?x256xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16> -> tensor<?x?x?x256xbf16>
  return %o : tensor<?x?x?x256xbf16>
}
func.func @mla192(%q: tensor<?x?x?x192xbf16>, %k: tensor<?x?x?x192xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x192xbf16>, tensor<?x?x?x192xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
func.func @mla256(%q: tensor<?x?x?x256xbf16>, %k: tensor<?x?x?x256xbf16>, %v: tensor<?x?x?x128xbf16>) -> tensor<?x?x?x128xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.1 : f32} : tensor<?x?x?x256xbf16>, tensor<?x?x?x256xbf16>, tensor<?x?x?x128xbf16> -> tensor<?x?x?x128xbf16>
  return %o : tensor<?x?x?x128xbf16>
}
