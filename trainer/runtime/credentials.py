"""Random credentials of the build's side objects: what goes into a TrainJob's
``<job>-data-cache-auth`` Secret (trainer.plugins.datacache; docs/data-cache.md, "Security").

Like :mod:`~trainer.runtime.sshkeys`, the randomness stays outside the pure build: the caller
(the controller, ``trainer render``) hands :func:`generate_credential` to the build as
:attr:`~trainer.runtime.info.BuildContext.credential_gen`, and the plugin calls it only when
the Secret does not exist yet. Tests pass a fixed one.
"""

from __future__ import annotations

import secrets

CREDENTIAL_BYTES = 32


def generate_credential() -> str:
    """A fresh credential: 32 bytes from the OS's CSPRNG as URL-safe base64 text (43
    characters), printable so that it reads back from a mounted file as it was written."""
    return secrets.token_urlsafe(CREDENTIAL_BYTES)
