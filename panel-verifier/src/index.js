// The bundle's public surface (window.AttestedReplayVerify), used by panel.js and the tests.
export {
  canonicalize, checkCosignatures, endorsementVerdict, fingerprint, loadTrust, parseWitnessKey, reportVerdict, verifyEnvelope,
} from "./verify.js";
export { pemCertificates } from "./der.js";
