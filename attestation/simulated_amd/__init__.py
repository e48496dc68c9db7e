"""A simulated AMD: its own key hierarchy, certificates and report signer, and its state.

It mirrors AMD's PKI so that simulated evidence runs through exactly the verifier code real
evidence does, and it is never mistaken for AMD: every certificate says
``O=SIMULATED - not AMD``, and the verifier accepts a simulated root only when a tenant pins its
fingerprint. The verifier (``attestation``) never imports this package; this package imports
``attestation`` for the report, HCL and TPM quote layouts and AMD's KDS extension OIDs, and
nothing else.

* :mod:`attestation.simulated_amd.pki` certificate names, lifetimes, RSA-PSS signing and PEM
  helpers;
* :mod:`attestation.simulated_amd.amd` :class:`SimulatedAmd`: keys, endorsements, reports, CRLs;
* :mod:`attestation.simulated_amd.vtpm` a simulated Azure confidential VM: HCL report and vTPM
  quote;
* :mod:`attestation.simulated_amd.state` keeping one in a directory (created once, never replaced).
"""

from attestation.simulated_amd.amd import SIMULATED_CHIP_ID, SimulatedAmd, sign_with_key

__all__ = ["SIMULATED_CHIP_ID", "SimulatedAmd", "sign_with_key"]
