#!/usr/bin/env python3
"""Verifies tokens signed through Vault/OpenBao Transit with PyJWT, from our
JWKS only: tests/transit.rs runs it as `transit_pyjwt.py JWKS TOKENS`.

Each token's kid picks its key from the JWKS (PyJWK); PyJWT checks the
signature with the algorithm the JWK names, the audience, and exp."""
import json
import sys

import jwt


def main():
    jwks = json.load(open(sys.argv[1]))
    by_kid = {k["kid"]: k for k in jwks["keys"]}
    tokens = [t for t in open(sys.argv[2]).read().split("\n") if t]
    algs = set()
    for token in tokens:
        header = jwt.get_unverified_header(token)
        jwk = by_kid[header["kid"]]
        key = jwt.PyJWK(jwk)
        if header["alg"] != jwk["alg"]:
            sys.exit("alg %r is not the JWK's %r" % (header["alg"], jwk["alg"]))
        claims = jwt.decode(token, key, algorithms=[jwk["alg"]], audience="vault.io",
                            options={"require": ["exp", "iat", "sub"]})
        if not claims["sub"].startswith("global:"):
            sys.exit("unexpected sub %r" % claims["sub"])
        algs.add(header["alg"])
    if algs != {"EdDSA", "ES256", "RS256"}:
        sys.exit("expected all three algorithms, got %r" % sorted(algs))
    print("%d tokens verified (%s)" % (len(tokens), ", ".join(sorted(algs))))


if __name__ == "__main__":
    main()
