"""A stand-in AEAD cipher for LangGraph's ``EncryptedSerializer`` in the diff tests.

pycryptodome (``from_pycryptodome_aes``) is no dependency: this has AES-EAX's shape,
a random 16-byte nonce per value (equal values are different bytes), a keyed BLAKE2b
keystream and a 16-byte tag (a wrong key fails), and ``tagless`` (no tag check: a wrong
key decrypts to other bytes without raising)."""

from __future__ import annotations

import hashlib
import hmac
import os


class NonceCipher:
    """A stand-in AEAD (random nonce, keyed BLAKE2b stream, 16-byte tag); ``tagless``:
    no tag check, so a wrong key decrypts to other bytes without raising."""

    def __init__(self, key: bytes, *, tagless: bool = False) -> None:
        self.key, self.tagless = key, tagless

    def _stream(self, nonce: bytes, n: int) -> bytes:
        out = b""
        for i in range(0, n, 64):
            out += hashlib.blake2b(nonce + i.to_bytes(8, "big"), key=self.key).digest()
        return out[:n]

    def _tag(self, nonce: bytes, body: bytes) -> bytes:
        return hashlib.blake2b(nonce + body, key=self.key, digest_size=16).digest()

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(16)
        body = bytes(
            x ^ y for x, y in zip(plaintext, self._stream(nonce, len(plaintext)), strict=True)
        )
        return "xn", nonce + self._tag(nonce, body) + body

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        nonce, tag, body = ciphertext[:16], ciphertext[16:32], ciphertext[32:]
        if not self.tagless and not hmac.compare_digest(tag, self._tag(nonce, body)):
            raise ValueError("wrong key or damaged ciphertext")
        return bytes(x ^ y for x, y in zip(body, self._stream(nonce, len(body)), strict=True))
