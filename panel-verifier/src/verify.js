// The trust panel's verifier: what `verify-attested-run` checks of one envelope's SEV-SNP
// evidence, redone in the tenant's browser with WebCrypto against the pinned AMD roots (and a
// simulated root only when the tenant loads one). Stages and failure classes follow
// attestation/verify/verifier.py and attestation/envelope/verification.py; every constant
// (report layout, roots, OIDs, PSS parameters) comes from the server's verifier data, which
// routes.py builds from those Python modules.
import { Failure } from "./failure.js";
import {
  OID, attributes, equalBytes, hex, nonNegativeInteger, parseCertificate, pemCertificates, readSingle, rsaJwk,
} from "./der.js";
import { evaluatePolicy, policyOf } from "./policy.js";
import { p1363Signature, parseReport } from "./report.js";

const subtle = globalThis.crypto.subtle;
// R and S of an ECDSA P-384 signature are 48 bytes (each report field holds 72, zero-padded).
const P384_BYTES = 48;
const encoder = new TextEncoder();

async function sha(name, bytes) {
  return new Uint8Array(await subtle.digest(name, bytes));
}

export async function fingerprint(der) {
  return "sha256:" + hex(await sha("SHA-256", der));
}

// ---- trust -----------------------------------------------------------------------------------

/** The pinned AMD certificates (each checked against its pinned fingerprint) and the tenant's
 * simulated roots (refused when one is AMD's). */
export async function loadTrust(data, simulatedRoots = []) {
  const amd = {};
  const pinned = new Set();
  for (const root of data.roots) {
    const [der] = pemCertificates(root.pem, `pinned ${root.productLine} ${root.role}`);
    const actual = await fingerprint(der);
    if (actual !== root.fingerprint) {
      throw new Failure("untrusted-chain", `pinned AMD ${root.productLine} ${root.role} has fingerprint ${actual}, not ${root.fingerprint}`);
    }
    pinned.add(actual);
    amd[root.productLine] = amd[root.productLine] || {};
    amd[root.productLine][root.role] = parseCertificate(der, `pinned ${root.productLine} ${root.role}`);
  }
  const simulated = [];
  for (const der of simulatedRoots) {
    const print = await fingerprint(der);
    if (pinned.has(print)) throw new Failure("usage", `${print} is an AMD certificate, not a simulated root`);
    simulated.push({ certificate: parseCertificate(der, "simulated root"), fingerprint: print });
  }
  return { data, amd, simulated };
}

// ---- the endorsement (VCEK / VLEK) -------------------------------------------------------------

function commonName(names) {
  const found = attributes(names, OID.commonName);
  return found.length ? String(found[0]) : "";
}

async function endorsementOf(cert, data) {
  const spec = data.endorsement;
  const cns = attributes(cert.subjectNames, OID.commonName);
  if (cns.length !== 1) throw new Failure("malformed", `certificate subject must have exactly one CN, found ${cns.length}`);
  const signerKind = spec.signers[String(cns[0])];
  if (!signerKind) throw new Failure("malformed", `certificate subject CN ${JSON.stringify(String(cns[0]))} is neither 'SEV-VCEK' nor 'SEV-VLEK'`);
  const values = new Map();
  for (const [oid, value] of cert.extensions) {
    if (!oid.startsWith(spec.amdArc + ".")) continue;
    if (!spec.knownOids.includes(oid)) throw new Failure("malformed", `certificate carries unknown AMD extension ${oid}`);
    values.set(oid, value);
  }
  if (cert.keyAlgorithm !== OID.ecPublicKey || !cert.keyParameters || cert.keyParameters.valueBlock.toString() !== OID.secp384r1) {
    throw new Failure("malformed", `${signerKind.toUpperCase()} public key must be ECDSA P-384`);
  }
  const integer = (oid, name) => {
    const raw = values.get(oid);
    if (raw === undefined) return null;
    const what = `certificate extension ${name} (${oid})`;
    return nonNegativeInteger(readSingle(raw, what, 0x02), what);
  };
  const string = (oid, name) => {
    const raw = values.get(oid);
    if (raw === undefined) return null;
    const what = `certificate extension ${name} (${oid})`;
    const content = readSingle(raw, what, 0x16);
    if (content.some((b) => b >= 0x80)) throw new Failure("malformed", `${what}: IA5String contains non-ASCII bytes`);
    return String.fromCharCode(...content);
  };
  const structVersion = integer(spec.oids.structVersion, "structVersion");
  const productName = string(spec.oids.productName, "productName");
  let productLine = null;
  if (productName !== null) {
    const match = /^([A-Za-z]+)(?:-[A-Za-z0-9]+)?$/.exec(productName);
    if (!match || !spec.products.includes(match[1])) {
      throw new Failure("malformed", `certificate productName ${JSON.stringify(productName)} names no known product line`);
    }
    productLine = match[1];
  }
  const spls = {};
  for (const [name, oid] of Object.entries(spec.splOids)) {
    const value = integer(oid, `${name}SPL`);
    if (value === null) continue;
    if (value > 0xff) throw new Failure("malformed", `certificate extension ${name}SPL (${oid}) = ${value} exceeds 255`);
    spls[name] = value;
  }
  let hwid = null;
  const rawHwid = values.get(spec.oids.hwid);
  if (rawHwid !== undefined) {
    const what = `certificate extension hwID (${spec.oids.hwid})`;
    if (spec.hwidLengths.includes(rawHwid.length)) hwid = rawHwid;
    else if (rawHwid[0] === 0x04) {
      const content = readSingle(rawHwid, what, 0x04);
      if (!spec.hwidLengths.includes(content.length)) throw new Failure("malformed", `${what}: wrapped hwID is ${content.length} bytes, not 8 or 64`);
      hwid = content;
    } else throw new Failure("malformed", `${what}: ${rawHwid.length} bytes, expected 8 or 64 raw bytes`);
  }
  string(spec.oids.cspId, "csp_id");
  let publicKey;
  const spki = uncompressedPoint(cert.spki);
  try {  // WebCrypto refuses a point that is not on the curve, as `cryptography` does
    if (spki === null) throw new DOMException("hybrid point of the wrong parity", "DataError");
    publicKey = await subtle.importKey("spki", spki, { name: "ECDSA", namedCurve: "P-384" }, false, ["verify"]);
  } catch (error) {
    throw new Failure("malformed", `${signerKind.toUpperCase()} public key cannot be decoded: ${error.name}`);
  }
  return { cert, signerKind, structVersion, productLine, spls, hwid, publicKey };
}

// OpenSSL (under `cryptography`) also reads the hybrid point forms 0x06/0x07 (X, Y and Y's
// parity); WebCrypto reads only 0x04, so a hybrid point whose parity holds is rewritten to it.
const P384_POINT = 97;

function uncompressedPoint(spki) {
  const at = spki.length - P384_POINT;
  const form = spki[at];
  if (form !== 0x06 && form !== 0x07) return spki;
  if ((spki[spki.length - 1] & 1) !== (form & 1)) return null;
  const out = new Uint8Array(spki);
  out[at] = 0x04;
  return out;
}

// ---- the chain -------------------------------------------------------------------------------

function requireAmdSignatureAlgorithm(cert, label, data) {
  if (cert.signatureUnusedBits !== 0) throw new Failure("untrusted-chain", `${label}: the signature is not a BIT STRING with 0 unused bits`);
  if (!equalBytes(cert.tbsAlgorithm, cert.algorithm)) throw new Failure("untrusted-chain", `${label}: signed and unsigned signature algorithm identifiers differ`);
  // The contents of the AlgorithmIdentifier SEQUENCE (AMD's are shorter than 128 bytes).
  const content = cert.algorithm[1] < 0x80 ? hex(cert.algorithm.subarray(2)) : "";
  if (!data.chain.pssIdentifiers.includes(content)) {
    throw new Failure("untrusted-chain", `${label}: not signed with RSASSA-PSS / SHA-384 / MGF1-SHA-384 / salt 48`);
  }
}

function requireValidity(cert, label, now) {
  if (now < cert.notBefore) throw new Failure("untrusted-chain", `${label} is not yet valid (notBefore ${cert.notBefore.toISOString()})`);
  if (now > cert.notAfter) throw new Failure("untrusted-chain", `${label} expired (notAfter ${cert.notAfter.toISOString()})`);
}

function requireKnownCritical(cert, label, data) {
  const unknown = cert.critical.filter((oid) => !data.chain.handledCritical.includes(oid));
  if (unknown.length) throw new Failure("untrusted-chain", `${label} has unknown critical extensions ${unknown.join(", ")}`);
}

function requireSound(cert, label, now, data) {
  requireAmdSignatureAlgorithm(cert, label, data);
  if (cert.version !== 2) throw new Failure("untrusted-chain", `${label} is not an X.509 v3 certificate; AMD's are`);
  requireValidity(cert, label, now);
  requireKnownCritical(cert, label, data);
}

function basicConstraintsCa(cert) {
  const raw = cert.extensions.get(OID.basicConstraints);
  if (raw === undefined) return null;
  const seq = cert.certificate.extensions.find((e) => e.extnID === OID.basicConstraints).parsedValue;
  return Boolean(seq && seq.cA);
}

function requireSigningAuthority(cert, label) {
  const ca = basicConstraintsCa(cert);
  if (ca === null) throw new Failure("untrusted-chain", `${label} has no basicConstraints; it is not a CA`);
  if (!ca) throw new Failure("untrusted-chain", `${label} has basicConstraints cA=false; it is not a CA`);
  const usage = cert.certificate.extensions.find((e) => e.extnID === OID.keyUsage);
  if (usage) {
    const bits = new Uint8Array(usage.parsedValue.valueBlock.valueHexView);
    if (!(bits[0] & 0x04)) throw new Failure("untrusted-chain", `${label} key usage does not allow certificate signing`);
  }
}

const rsaKeys = new WeakMap();

async function signedBy(child, issuer, data) {
  let key = rsaKeys.get(issuer);
  if (key === undefined) {
    const jwk = rsaJwk(issuer.publicKeyBits);
    key = null;
    if (jwk && jwk.bits === data.chain.rsaBits) {
      try {
        key = await subtle.importKey("jwk", jwk.jwk, { name: "RSA-PSS", hash: "SHA-384" }, false, ["verify"]);
      } catch {
        key = null;
      }
    }
    rsaKeys.set(issuer, key);
  }
  if (key === null) return false;
  try {
    return await subtle.verify({ name: "RSA-PSS", saltLength: data.chain.pssSaltLength }, key, child.signature, child.tbs);
  } catch {
    return false;
  }
}

function looksSimulated(names, data) {
  return attributes(names, OID.organization).some((value) => String(value) === data.chain.simulatedOrganization);
}

function intermediateFor(cert, kind, data) {
  const name = commonName(cert.subjectNames);
  if (!name.startsWith("SEV-") || name === "SEV-VCEK" || name === "SEV-VLEK") return false;
  return name.startsWith(data.chain.vlekIntermediatePrefix) === (kind === "vlek");
}

async function verifyChain(endorsement, productLine, supplied, trust, now) {
  const { data } = trust;
  const kind = endorsement.signerKind;
  const label = kind.toUpperCase();
  const leaf = endorsement.cert;
  const pinnedIntermediate = trust.amd[productLine][kind === "vcek" ? "ask" : "asvk"];
  const matching = supplied.filter((c) => intermediateFor(c, kind, data));
  const anchors = [[trust.amd[productLine].ark, [pinnedIntermediate, ...matching], false]];
  for (const root of trust.simulated) anchors.push([root.certificate, matching, true]);
  const failures = [];
  let path = null;
  for (const [ark, candidates, simulated] of anchors) {
    const rootLabel = simulated ? "simulated ARK" : `${productLine} ARK`;
    if (!commonName(ark.subjectNames).startsWith(data.chain.arkPrefix)) {
      failures.push(`${rootLabel} is not named like an ARK ('ARK-...')`);
      continue;
    }
    if (!equalBytes(ark.subject, ark.issuer) || !(await signedBy(ark, ark, data))) {
      failures.push(`${rootLabel} is not validly self-signed`);
      continue;
    }
    for (const candidate of candidates) {
      if (!equalBytes(candidate.subject, leaf.issuer) || !equalBytes(candidate.issuer, ark.subject) || equalBytes(candidate.subject, candidate.issuer)) continue;
      if (!(await signedBy(leaf, candidate, data))) {
        failures.push(`${label} signature does not verify under ${commonName(candidate.subjectNames)}`);
        continue;
      }
      if (!(await signedBy(candidate, ark, data))) {
        failures.push(`supplied ${commonName(candidate.subjectNames)} does not verify under the pinned ${rootLabel}`);
        continue;
      }
      path = { ark, intermediate: candidate, simulated, pinned: candidate === pinnedIntermediate };
      break;
    }
    if (path) break;
  }
  if (!path) {
    if (!trust.simulated.length && (looksSimulated(leaf.issuerNames, data) || supplied.some((c) => looksSimulated(c.subjectNames, data)))) {
      throw new Failure("untrusted-chain", `${label} chains to a simulated root, and no simulated root is loaded: load the simulated root you pinned to check it`);
    }
    throw new Failure("untrusted-chain", failures.length ? [...new Set(failures)].join("; ") : `${label} issuer is neither the pinned ${productLine} intermediate nor a supplied one that chains to a pinned root`);
  }
  const arkLabel = path.simulated ? "simulated ARK" : `${productLine} ARK`;
  const intermediateLabel = commonName(path.intermediate.subjectNames);
  requireSound(path.ark, arkLabel, now, data);
  requireSound(path.intermediate, intermediateLabel, now, data);
  requireAmdSignatureAlgorithm(leaf, label, data);
  if (leaf.version !== 2) throw new Failure("untrusted-chain", `${label} is not an X.509 v3 certificate; AMD's are`);
  requireValidity(leaf, label, now);
  requireKnownCritical(leaf, label, data);
  requireSigningAuthority(path.ark, arkLabel);
  requireSigningAuthority(path.intermediate, intermediateLabel);
  if (basicConstraintsCa(leaf)) throw new Failure("untrusted-chain", `${label} is marked as a CA (basicConstraints cA=true)`);
  return path;
}

// ---- stage 4: does the certificate describe the report? ----------------------------------------

function tcbComponents(raw, productLine, data) {
  const layout = data.tcbLayouts[productLine];
  return Object.fromEntries(Object.entries(layout).map(([name, index]) => [name, raw[index]]));
}

function endorsementMismatches(report, endorsement, data) {
  const problems = [];
  const spec = data.endorsement;
  const kind = Object.entries(data.report.signingKeys).find(([, value]) => value === report.signingKey)[0];
  if (kind !== endorsement.signerKind) problems.push(`report SIGNING_KEY ${report.signingKey} but the certificate is a ${endorsement.signerKind.toUpperCase()}`);
  const own = report.product;
  const certified = endorsement.productLine;
  if (own === null && certified === null) problems.push("version 2 report and no productName");
  else if (own !== null && certified !== own) problems.push(`report CPUID says ${own} but the certificate is for ${certified || "no product"}`);
  const product = own || certified;
  if (product === null) return problems.concat(["no product line"]);
  const turin = product === spec.turinLayoutProduct;
  const wantStruct = turin ? spec.turinStructVersion : spec.milanGenoaStructVersion;
  if (endorsement.structVersion !== wantStruct) problems.push(`structVersion ${endorsement.structVersion} but ${product} needs ${wantStruct}`);
  const reported = tcbComponents(report.reportedTcb, product, data);
  for (const name of turin ? [...spec.requiredSpls, "fmc"] : spec.requiredSpls) {
    if (!(name in endorsement.spls)) problems.push(`${name}SPL missing`);
  }
  for (const [name, value] of Object.entries(endorsement.spls)) {
    if (!(name in reported)) problems.push(`${name}SPL ${value} has no place in a ${product} TCB`);
    else if (reported[name] !== value) problems.push(`${name}SPL ${value} != REPORTED_TCB ${reported[name]}`);
  }
  const hwid = endorsement.hwid;
  const chip = report.chipId;
  if (endorsement.signerKind === "vlek") {
    if (hwid !== null) problems.push("a VLEK must not carry a hwID");
  } else if (hwid === null) problems.push("the VCEK has no hwID");
  else if (chip.every((b) => b === 0)) problems.push("CHIP_ID is masked (all zero) and cannot be bound to the VCEK hwID");
  else if (turin ? !(hwid.length === spec.turinHwidLength && equalBytes(chip.subarray(0, spec.turinHwidLength), hwid) && chip.subarray(spec.turinHwidLength).every((b) => b === 0)) : !equalBytes(hwid, chip)) {
    problems.push(`hwID ${hex(hwid)} != CHIP_ID ${hex(chip)}`);
  }
  return problems;
}

// ---- one report and its endorsement ------------------------------------------------------------

/**
 * Stages 1-4 of attestation.verify.verifier (what `verify_endorsement` decides): parse, chain
 * to a pinned root at `now`, the report signature, the certificate describes the report.
 * Returns {report, endorsement, chain}; throws a Failure with the first failing class.
 */
export async function verifyReport(reportBytes, certificateDers, trust, now) {
  const { data } = trust;
  let report = null;
  let parseError = null;
  try {
    report = parseReport(data.report, reportBytes);
  } catch (error) {
    parseError = error;
  }
  if (certificateDers.length === 0) throw new Failure("malformed", "no certificate given");
  const certificates = certificateDers.map((der, index) => parseCertificate(der, `certificate ${index + 1} of ${certificateDers.length}`));
  const endorsement = await endorsementOf(certificates[0], data);
  if (parseError) throw parseError;
  const chainProduct = endorsement.productLine || report.product;
  if (chainProduct === null) {
    throw new Failure("untrusted-chain", "neither the certificate (productName) nor the version 2 report names a product line, so no AMD root applies");
  }
  const chain = await verifyChain(endorsement, chainProduct, certificates.slice(1), trust, now);
  if (report.unsigned) throw new Failure("bad-signature", "report is unsigned (SIGNING_KEY = 7 or an all-zero signature field)");
  const signature = p1363Signature(report, P384_BYTES);
  let valid = false;
  if (signature !== null) {
    valid = await subtle.verify({ name: "ECDSA", hash: "SHA-384" }, endorsement.publicKey, signature, report.signed);
  }
  if (!valid) throw new Failure("bad-signature", "report signature does not verify with the certificate's public key (ECDSA P-384/SHA-384 over 0x000-0x29f)");
  const problems = endorsementMismatches(report, endorsement, data);
  if (problems.length) throw new Failure("endorsement-mismatch", problems.join("; "));
  return { report, endorsement, chain };
}

/** Stages 5-6 (platform policy, workload identity) under the defaults and the tenant's keys;
 * an envelope checked against expected values is a claim about a workload. */
function policyChecks(reportBytes, report, endorsement, chain, data, expected) {
  const signer = Object.entries(data.report.signingKeys).find(([, value]) => value === report.signingKey)[0];
  return evaluatePolicy(reportBytes, report, policyOf(data, expected), {
    product: report.product || endorsement.productLine,
    signer,
    hardware: !chain.simulated,
    workloadClaim: expected !== null,
    data,
  });
}

/** The class `verify-attested-run --report --endorsement` reaches (raw mode, the default
 * policy or the given policy keys): stages 1-6. */
export async function reportVerdict(reportBytes, certificateDers, trust, now, policyKeys = null) {
  try {
    const { report, endorsement, chain } = await verifyReport(reportBytes, certificateDers, trust, now);
    const signer = Object.entries(trust.data.report.signingKeys).find(([, value]) => value === report.signingKey)[0];
    evaluatePolicy(reportBytes, report, policyOf(trust.data, policyKeys), {
      product: report.product || endorsement.productLine, signer, hardware: !chain.simulated, workloadClaim: false, data: trust.data,
    });
    return { verdict: "verified" };
  } catch (error) {
    if (error instanceof Failure) return { verdict: error.failureClass, detail: error.message };
    return { verdict: "malformed", detail: String(error && error.message ? error.message : error) };
  }
}

// ---- the envelope ------------------------------------------------------------------------------

/** RFC 8785 (JCS) for JSON values as JSON.parse returns them. */
export function canonicalize(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return "[" + value.map(canonicalize).join(",") + "]";
  return "{" + Object.keys(value).sort().map((key) => JSON.stringify(key) + ":" + canonicalize(value[key])).join(",") + "}";
}

function base64Bytes(text, what) {
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    throw new Failure("malformed", `${what} is not base64`);
  }
}

function object(value, what) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Failure("malformed", `${what} is not a JSON object`);
  return value;
}

function text(value, what) {
  if (typeof value !== "string") throw new Failure("malformed", `${what} is not a string`);
  return value;
}

async function reportDataFor(binding, encoding) {
  const canonical = encoder.encode(canonicalize(binding));
  if (encoding === "sha512") return sha("SHA-512", canonical);
  if (encoding === "sha256-hex") return encoder.encode(hex(await sha("SHA-256", canonical)));
  throw new Failure("malformed", `unknown reportDataEncoding ${JSON.stringify(encoding)}`);
}

/** What the tenant's expected-values file expects of the run, checked as
 * attestation/envelope/expectations.py does (class expectation). */
async function expectationProblems(binding, expected) {
  const problems = [];
  const workloadDigest = "sha256:" + hex(await sha("SHA-256", encoder.encode(canonicalize(binding.workload))));
  const rows = [
    ["runId", expected.runId, binding.runId],
    ["corpusChecksum", expected.corpusChecksum, binding.corpusChecksum],
    ["tenant", expected.tenant, binding.tenant],
    ["workloadDigest", expected.workloadDigest, workloadDigest],
    ["resultDigest", expected.resultDigest, binding.resultDigest],
    ["evaluationDigest", expected.evaluationDigest, binding.evaluationDigest],
    ["imageDigest", expected.imageDigest, binding.imageDigest],
    ["nonce", expected.nonce, binding.nonce],
  ];
  for (const [key, wanted, actual] of rows) {
    if (wanted === undefined || wanted === null) continue;
    if (wanted !== actual) problems.push(`${key} is ${actual === undefined ? "absent" : actual}, the tenant expected ${wanted}`);
  }
  if ((expected.evaluationDigest === undefined || expected.evaluationDigest === null) && expected.acceptAnyEvaluation !== true) {
    problems.push("evaluationDigest is not pinned (and acceptAnyEvaluation is not true)");
  }
  const shard = binding.shard;
  if (shard) problems.push(`shard ${shard.index} of ${shard.count}: a part of a run, not a whole one`);
  else if (expected.shardCount !== undefined && expected.shardCount !== null && expected.shardCount !== 1) problems.push(`a whole, unsharded run, the tenant expected ${expected.shardCount} shards`);
  return problems;
}

/**
 * Verify one stored envelope (its JSON bytes) in the browser. Returns
 * {status: "verified" | "failed" | "not-checked", failureClass?, detail, checked: [...], notChecked: [...]}.
 */
export async function verifyEnvelope(bytes, trust, { now = new Date(), expected = null } = {}) {
  const notChecked = [];
  try {
    let envelope;
    try {
      envelope = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch (error) {
      throw new Failure("malformed", `the envelope is not JSON: ${error.message}`);
    }
    object(envelope, "the envelope");
    if (envelope.kind !== "AttestationEnvelope") {
      return { status: "not-checked", detail: `a ${String(envelope.kind)} is not checked in the browser: verify it with verify-attested-run`, checked: [], notChecked };
    }
    const evidence = object(envelope.evidence, "evidence");
    if (evidence.kind !== undefined && evidence.kind !== null) {
      return { status: "not-checked", detail: `${String(evidence.kind)} evidence is not checked in the browser: verify it with verify-attested-run`, checked: [], notChecked };
    }
    const binding = object(envelope.binding, "binding");
    const reportBytes = base64Bytes(text(evidence.report, "evidence.report"), "evidence.report");
    const ders = pemCertificates(text(evidence.certChain, "evidence.certChain"), "evidence.certChain");
    const { report, endorsement, chain } = await verifyReport(reportBytes, ders, trust, now);
    const checked = [
      chain.simulated ? "chain to the simulated root you loaded" : "chain to AMD's pinned root",
      "report signature (ECDSA P-384)",
      "the certificate describes the report (signer, product, TCB, chip)",
    ];
    const identity = policyChecks(reportBytes, report, endorsement, chain, trust.data, expected);
    checked.push(expected === null ? "platform policy (the defaults)" : "platform policy (the defaults and your expected values' keys)");
    if (identity.checked.length) checked.push(`${identity.checked.join(", ")} as your expected values pin`);
    notChecked.push(...identity.notChecked);
    if (expected !== null && expected.initDataDigest) {
      if (hex(report.hostData) !== String(expected.initDataDigest).toLowerCase()) {
        throw new Failure("workload-identity", `HOST_DATA ${hex(report.hostData)} is not the pinned init-data digest`);
      }
      checked.push("HOST_DATA is your init-data digest");
    }
    const encoding = evidence.reportDataEncoding === undefined ? "sha512" : evidence.reportDataEncoding;
    const wanted = await reportDataFor(binding, encoding);
    if (!equalBytes(wanted, report.reportData)) {
      throw new Failure("binding", `REPORT_DATA ${hex(report.reportData)} is not the ${encoding} of this envelope's binding: the binding or the report was changed`);
    }
    const platform = chain.simulated ? "simulated" : "sev-snp";
    const pairs = [
      ["reportData", envelope.reportData, hex(report.reportData)],
      ["measurement", envelope.measurement, hex(report.measurement)],
      ["hostData", envelope.hostData, hex(report.hostData)],
      ["runId", envelope.runId, binding.runId],
      ["tenant", envelope.tenant, binding.tenant],
      ["platform", envelope.platform, platform],
    ];
    const mismatched = pairs.filter(([, claimed, actual]) => claimed !== actual).map(([key, claimed, actual]) => `${key} says ${JSON.stringify(claimed)} but the evidence says ${JSON.stringify(actual)}`);
    if (mismatched.length) throw new Failure("binding", mismatched.join("; "));
    if (envelope.result !== undefined && envelope.result !== null) {
      const digest = "sha256:" + hex(await sha("SHA-256", encoder.encode(canonicalize(envelope.result))));
      if (digest !== binding.resultDigest) throw new Failure("binding", `the result's digest is ${digest}, the binding says ${binding.resultDigest}: the result was changed`);
    }
    checked.push("REPORT_DATA binds this envelope's binding", "the envelope's fields equal the report's");
    if (expected === null) {
      notChecked.push("your expected run, corpus, evaluation and workload (load your expected values)");
    } else {
      const problems = await expectationProblems(binding, expected);
      if (problems.length) throw new Failure("expectation", problems.join("; "));
      checked.push("run, corpus, evaluation and workload as your expected values say");
    }
    return { status: "verified", detail: checked.join("; "), checked, notChecked, simulated: chain.simulated };
  } catch (error) {
    if (error instanceof Failure) return { status: "failed", failureClass: error.failureClass, detail: error.message, checked: [], notChecked };
    return { status: "failed", failureClass: "malformed", detail: `the verifier could not judge this envelope: ${error && error.message ? error.message : error}`, checked: [], notChecked };
  }
}

/** The class stages 1-4 reach for a raw report and its certificate ("verified" when none fails):
 * what the parity tests compare with the Python verifier's verify_endorsement. */
export async function endorsementVerdict(reportBytes, certificateDers, trust, now) {
  try {
    await verifyReport(reportBytes, certificateDers, trust, now);
    return { verdict: "verified" };
  } catch (error) {
    if (error instanceof Failure) return { verdict: error.failureClass, detail: error.message };
    return { verdict: "malformed", detail: String(error && error.message ? error.message : error) };
  }
}

// ---- witness cosignatures (C2SP tlog-cosignature, Ed25519 cosignature/v1) -----------------------

/** Parse a verifier key `name+keyid+base64(type || key)`; null unless it is an Ed25519 witness
 * key whose key ID is SHA-256(name || 0x0A || type || key)[:4] (C2SP signed-note). */
export async function parseWitnessKey(text, cosignatureType) {
  // The name and the key ID end at the first two "+"; the base64 key may hold "+" itself.
  const match = /^([^\s+]+)\+([0-9a-f]{8})\+(\S+)$/.exec(text.trim());
  if (match === null) return null;
  const parts = match.slice(1);
  let raw;
  try {
    raw = Uint8Array.from(atob(parts[2]), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
  if (raw.length !== 33 || raw[0] !== cosignatureType) return null;
  const named = new Uint8Array([...encoder.encode(parts[0]), 0x0a, ...raw]);
  if (hex((await sha("SHA-256", named)).subarray(0, 4)) !== parts[1]) return null;
  return { name: parts[0], keyId: parts[1], publicKey: raw.subarray(1), text: text.trim() };
}

/** Each signature line of a cosigned checkpoint note, with the witness key the tenant pinned for
 * it (by name and key ID) and whether its cosignature verifies under that key. */
export async function checkCosignatures(note, pinnedKeys) {
  const split = note.indexOf("\n\n");
  const body = note.slice(0, split + 1);
  const lines = note.slice(split + 2).split("\n").filter((line) => line.length > 0);
  const out = [];
  for (const line of lines) {
    const [, name = "?", blob = ""] = line.split(" ");
    let raw = new Uint8Array(0);
    try {
      raw = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0));
    } catch { /* an unreadable line: its key ID is unknown */ }
    const keyId = hex(raw.subarray(0, 4));
    const pinned = pinnedKeys.find((key) => key.name === name && key.keyId === keyId) || null;
    let status = "not-checked";
    // key ID (4) || timestamp (8, big-endian) || Ed25519 signature (64)
    const timestamp = raw.length === 76 ? new DataView(raw.buffer, raw.byteOffset + 4, 8).getBigUint64(0) : null;
    if (pinned !== null) {
      status = "does-not-verify";
      if (timestamp !== null) {
        const message = encoder.encode(`cosignature/v1\ntime ${timestamp}\n` + body);
        try {
          const key = await subtle.importKey("raw", pinned.publicKey, { name: "Ed25519" }, false, ["verify"]);
          if (await subtle.verify({ name: "Ed25519" }, key, raw.subarray(12), message)) status = "verifies";
        } catch (error) {
          status = error && error.name === "NotSupportedError" ? "unsupported" : "does-not-verify";
        }
      }
    }
    out.push({ name, keyId, status, timestamp: timestamp === null ? null : String(timestamp) });
  }
  return out;
}
