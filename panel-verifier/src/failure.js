// A failed check: its class is one of the Python verifier's failure classes
// (attestation/errors.py), so the page's verdict reads like `verify-attested-run`'s.
export class Failure extends Error {
  constructor(failureClass, message) {
    super(message);
    this.failureClass = failureClass;
  }
}
