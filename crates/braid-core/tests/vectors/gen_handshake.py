#!/usr/bin/env python3
"""Known-answer vectors for braid's WireGuard handshake, computed by an
independent implementation (Python's hashlib + the `cryptography` package)
straight from the WireGuard paper (§5.4). Run it to regenerate
handshake.json; the Rust test pins every byte against that file."""
import hashlib, hmac, json, struct
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives import serialization

RAW = serialization.Encoding.Raw
def pub(priv):
    return X25519PrivateKey.from_private_bytes(priv).public_key().public_bytes(RAW, serialization.PublicFormat.Raw)
def dh(priv, pub_):
    return X25519PrivateKey.from_private_bytes(priv).exchange(X25519PublicKey.from_public_bytes(pub_))
def H(*parts):
    h = hashlib.blake2s()
    for p in parts: h.update(p)
    return h.digest()
def HMAC(k, m): return hmac.new(k, m, hashlib.blake2s).digest()
def KDF(n, key, inp):
    t0 = HMAC(key, inp); out = []; prev = b''
    for i in range(1, n + 1):
        prev = HMAC(t0, prev + bytes([i])); out.append(prev)
    return out
def MAC(key, m): return hashlib.blake2s(m, key=key, digest_size=16).digest()
def AEAD(k, ctr, pt, ad): return ChaCha20Poly1305(k).encrypt(b'\0' * 4 + struct.pack('<Q', ctr), pt, ad)

def key(byte):  # a deterministic, clamped-or-not 32-byte key
    return bytes((byte + i * 7) % 256 for i in range(32))

si, sr, ei, er = key(1), key(2), key(3), key(4)
psk = key(5)
Si, Sr = pub(si), pub(sr)
tai = struct.pack('>QI', (1 << 62) + 10 + 1_700_000_000, 0)
idx_i, idx_r = 0x11223344, 0x55667788

C = H(b'Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s')
Hh = H(C, b'WireGuard v1 zx2c4 Jason@zx2c4.com')
initial_ck, initial_h = C, Hh
Hh = H(Hh, Sr)
Ei = pub(ei)
C, = KDF(1, C, Ei)
Hh = H(Hh, Ei)
C, k = KDF(2, C, dh(ei, Sr))
enc_static = AEAD(k, 0, Si, Hh)
Hh = H(Hh, enc_static)
C, k = KDF(2, C, dh(si, Sr))
enc_ts = AEAD(k, 0, tai, Hh)
Hh = H(Hh, enc_ts)
msg1 = bytes([1, 0, 0, 0]) + struct.pack('<I', idx_i) + Ei + enc_static + enc_ts
mac1 = MAC(H(b'mac1----', Sr), msg1)
msg1_full = msg1 + mac1 + b'\0' * 16

Er = pub(er)
C, = KDF(1, C, Er)
Hh = H(Hh, Er)
C, = KDF(1, C, dh(er, Ei))
C, = KDF(1, C, dh(er, Si))
C, tau, k = KDF(3, C, psk)
Hh = H(Hh, tau)
enc_nothing = AEAD(k, 0, b'', Hh)
msg2 = bytes([2, 0, 0, 0]) + struct.pack('<II', idx_r, idx_i) + Er + enc_nothing
mac1r = MAC(H(b'mac1----', Si), msg2)
msg2_full = msg2 + mac1r + b'\0' * 16
t_send_i, t_recv_i = KDF(2, C, b'')

payload = bytes(range(20)) + b'\0' * 12  # 20-byte packet padded to 32
data = bytes([4, 0, 0, 0]) + struct.pack('<IQ', idx_r, 0) + AEAD(t_send_i, 0, payload, b'')

out = {
    'static_i': si.hex(), 'static_r': sr.hex(), 'ephemeral_i': ei.hex(), 'ephemeral_r': er.hex(),
    'psk': psk.hex(), 'timestamp': tai.hex(), 'index_i': idx_i, 'index_r': idx_r,
    'initial_chaining_key': initial_ck.hex(), 'initial_hash': initial_h.hex(),
    'initiation': msg1_full.hex(), 'response': msg2_full.hex(),
    'initiator_send': t_send_i.hex(), 'initiator_recv': t_recv_i.hex(),
    'data_payload': payload.hex(), 'data_message': data.hex(),
}
print(json.dumps(out, indent=1))
