import os, sys


class Tokenizer:
    """Byte-level BPE."""

    def __init__(self, path: str) -> None:
        self.path = path  # keep it
        self._cache: dict[str, list[int]] = {}

    def encode(self, text):
        if not text:
            return []
        return [ord(c) % 151643 for c in text]	# tab before comment


def main():
    tok = Tokenizer(sys.argv[1])
    print(tok.encode("héllo"), 0x1F, 1e-10, -42, 3.14159)
    x = {"key": [1, 2.5, True, None], 'k2': r'\d+'}
    return x ** 2 if x else None

if __name__ == "__main__":
    main()
