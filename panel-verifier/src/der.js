// Certificates as the verifier reads them: asn1js decodes, pkijs names the parts. Only DER is
// accepted (the input must re-encode to itself), as the Python verifier's `cryptography` does.
import * as asn1js from "asn1js";
import * as pkijs from "pkijs";
import { Failure } from "./failure.js";

export const OID = {
  commonName: "2.5.4.3",
  organization: "2.5.4.10",
  basicConstraints: "2.5.29.19",
  keyUsage: "2.5.29.15",
  ecPublicKey: "1.2.840.10045.2.1",
  secp384r1: "1.3.132.0.34",
};

export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function equalBytes(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i += 1) diff |= a[i] ^ b[i];
  return diff === 0;
}

function view(block) {
  return new Uint8Array(block.valueBeforeDecodeView);
}

/** One certificate from DER, or a Failure of class `malformed` naming `what`. */
export function parseCertificate(der, what) {
  const bytes = new Uint8Array(der);
  const decoded = asn1js.fromBER(bytes);
  if (decoded.offset === -1 || decoded.offset !== bytes.length) {
    throw new Failure("malformed", `${what}: not one DER certificate (${decoded.result.error || "trailing bytes"})`);
  }
  const again = new Uint8Array(decoded.result.toBER(false));
  if (!equalBytes(again, bytes)) {
    throw new Failure("malformed", `${what}: not DER (it does not re-encode to itself)`);
  }
  let certificate;
  try {
    certificate = new pkijs.Certificate({ schema: decoded.result });
  } catch (error) {
    throw new Failure("malformed", `${what}: not an X.509 certificate: ${error.message || error}`);
  }
  const outer = decoded.result.valueBlock.value;
  requireStrictParts(certificate, outer, what);
  const tbs = outer[0];
  const tbsParts = tbs.valueBlock.value;
  // The TBS's first SEQUENCE is its signature AlgorithmIdentifier (after [0] version, serial).
  const tbsAlgorithm = tbsParts.find((part) => part.idBlock.tagClass === 1 && part.idBlock.tagNumber === 16);
  const extensions = new Map();
  const critical = [];
  for (const extension of certificate.extensions || []) {
    if (extensions.has(extension.extnID)) {
      throw new Failure("malformed", `${what}: extensions cannot be decoded: duplicate extension ${extension.extnID}`);
    }
    extensions.set(extension.extnID, new Uint8Array(extension.extnValue.valueBlock.valueHexView));
    if (extension.critical) critical.push(extension.extnID);
  }
  const bitString = outer[2];
  return {
    der: bytes,
    certificate,
    version: certificate.version,
    tbs: view(tbs),
    tbsAlgorithm: tbsAlgorithm ? view(tbsAlgorithm) : new Uint8Array(0),
    algorithm: view(outer[1]),
    signatureUnusedBits: bitString.valueBlock.unusedBits,
    signature: new Uint8Array(bitString.valueBlock.valueHexView),
    subject: encoded(certificate.subject),
    issuer: encoded(certificate.issuer),
    subjectNames: names(certificate.subject),
    issuerNames: names(certificate.issuer),
    notBefore: certificate.notBefore.value,
    notAfter: certificate.notAfter.value,
    extensions,
    critical,
    spki: encoded(certificate.subjectPublicKeyInfo),
    keyAlgorithm: certificate.subjectPublicKeyInfo.algorithm.algorithmId,
    keyParameters: certificate.subjectPublicKeyInfo.algorithm.algorithmParams,
    publicKeyBits: new Uint8Array(certificate.subjectPublicKeyInfo.subjectPublicKey.valueBlock.valueHexView),
  };
}

function encoded(part) {
  return new Uint8Array(part.toSchema().toBER(false));
}

function names(name) {
  return name.typesAndValues.map((entry) => [entry.type, entry.value.valueBlock.value]);
}

export function attributes(entries, oid) {
  return entries.filter(([type]) => type === oid).map(([, value]) => value);
}

/** Split a PEM bundle into DER certificates (in order). */
export function pemCertificates(text, what) {
  const blocks = [...text.matchAll(/-----BEGIN CERTIFICATE-----([^-]*)-----END CERTIFICATE-----/g)];
  if (blocks.length === 0) throw new Failure("malformed", `${what}: no PEM certificate`);
  return blocks.map((block, index) => {
    try {
      return Uint8Array.from(atob(block[1].replace(/\s+/g, "")), (c) => c.charCodeAt(0));
    } catch {
      throw new Failure("malformed", `${what}: certificate ${index + 1} is not base64`);
    }
  });
}

/** A DER TLV read strictly (low tags, definite minimal lengths), as attestation/endorsement/der.py. */
export function readSingle(bytes, what, tag) {
  if (bytes.length < 2) throw new Failure("malformed", `${what}: truncated DER header`);
  const found = bytes[0];
  if ((found & 0x1f) === 0x1f) throw new Failure("malformed", `${what}: high-number DER tag`);
  let length = bytes[1];
  let position = 2;
  if (length >= 0x80) {
    const count = length & 0x7f;
    if (count === 0) throw new Failure("malformed", `${what}: indefinite DER length`);
    if (count > 4 || position + count > bytes.length) throw new Failure("malformed", `${what}: bad DER length octets`);
    length = 0;
    for (let i = 0; i < count; i += 1) length = length * 256 + bytes[position + i];
    if (bytes[position] === 0 || length < 0x80) throw new Failure("malformed", `${what}: non-minimal DER length`);
    position += count;
  }
  if (position + length !== bytes.length) {
    throw new Failure("malformed", `${what}: the DER value does not span the extension exactly`);
  }
  if (tag !== undefined && found !== tag) {
    throw new Failure("malformed", `${what}: expected DER tag 0x${tag.toString(16)}, found 0x${found.toString(16)}`);
  }
  return bytes.subarray(position);
}

export function nonNegativeInteger(content, what) {
  if (content.length === 0) throw new Failure("malformed", `${what}: empty INTEGER`);
  if (content.length > 1 && ((content[0] === 0 && content[1] < 0x80) || (content[0] === 0xff && content[1] >= 0x80))) {
    throw new Failure("malformed", `${what}: non-minimal INTEGER`);
  }
  if (content[0] >= 0x80) throw new Failure("malformed", `${what}: negative INTEGER`);
  let value = 0;
  for (const byte of content) value = value * 256 + byte;
  return value;
}

/** RSA public key (n, e) of an SPKI's BIT STRING, as a JWK WebCrypto imports for RSA-PSS. */
export function rsaJwk(publicKeyBits) {
  const decoded = asn1js.fromBER(publicKeyBits);
  if (decoded.offset === -1) return null;
  const parts = decoded.result.valueBlock.value;
  if (!parts || parts.length !== 2) return null;
  const strip = (bytes) => {
    let start = 0;
    while (start < bytes.length - 1 && bytes[start] === 0) start += 1;
    return bytes.subarray(start);
  };
  const n = strip(new Uint8Array(parts[0].valueBlock.valueHexView));
  const e = strip(new Uint8Array(parts[1].valueBlock.valueHexView));
  return { jwk: { kty: "RSA", n: base64url(n), e: base64url(e), ext: true }, bits: n.length * 8 - Math.clz32(n[0]) + 24 };
}

function base64url(bytes) {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// ---- what a strict DER X.509 parser (the Python verifier's `cryptography`) refuses and asn1js
// accepts: the verdict class of such input must be `malformed` in both. -----------------------

// Known algorithms whose parameters are NULL or absent: the SHA hashes, RSA and RSA PKCS#1 v1.5.
const HASH_OIDS = new Set([
  "1.3.14.3.2.26", "2.16.840.1.101.3.4.2.4", "2.16.840.1.101.3.4.2.1", "2.16.840.1.101.3.4.2.2", "2.16.840.1.101.3.4.2.3",
  "1.2.840.113549.1.1.1", "1.2.840.113549.1.1.4", "1.2.840.113549.1.1.5", "1.2.840.113549.1.1.11",
  "1.2.840.113549.1.1.12", "1.2.840.113549.1.1.13", "1.2.840.113549.1.1.14",
]);
// Known algorithms whose AlgorithmIdentifier must carry no parameters at all (ECDSA, DSA with
// SHA-2, EdDSA): `cryptography` refuses even a NULL after them.
const NO_PARAMETERS = new Set([
  "1.2.840.10045.4.3.1", "1.2.840.10045.4.3.2", "1.2.840.10045.4.3.3", "1.2.840.10045.4.3.4",
  "2.16.840.1.101.3.4.3.1", "2.16.840.1.101.3.4.3.2", "2.16.840.1.101.3.4.3.3", "2.16.840.1.101.3.4.3.4",
  "1.3.101.112", "1.3.101.113",
]);
const RSASSA_PSS = "1.2.840.113549.1.1.10";
const MGF1 = "1.2.840.113549.1.1.8";
// The attribute value tags `cryptography` takes in a name (found by trying each universal tag):
// OCTET STRING, UTF8String, NumericString, PrintableString, T61String, IA5String, UTCTime,
// GeneralizedTime, VisibleString, UniversalString, BMPString.
const NAME_VALUE_TAGS = new Set([4, 12, 18, 19, 20, 22, 23, 24, 26, 28, 30]);
const PRINTABLE = /^[A-Za-z0-9 '()+,\-./:=?]*$/;

function tlvs(bytes, what) {
  const out = [];
  let offset = 0;
  while (offset < bytes.length) {
    const decoded = asn1js.fromBER(bytes.subarray(offset));
    if (decoded.offset === -1) throw new Failure("malformed", `${what}: not DER`);
    out.push(new Uint8Array(decoded.result.valueBeforeDecodeView));
    offset += decoded.offset;
  }
  return out;
}

function contentOf(tlv, what) {
  return readSingle(tlv, what);
}

function oidOf(tlv) {
  const decoded = asn1js.fromBER(tlv);
  return decoded.result.valueBlock.toString();
}

function requireHashAlgorithm(tlv, what) {
  // AlgorithmIdentifier: OID, then a NULL or nothing for a known hash, any one value otherwise.
  if (tlv[0] !== 0x30) throw new Failure("malformed", `${what}: hash algorithm is not a SEQUENCE`);
  const items = tlvs(contentOf(tlv, what), what);
  if (items.length === 0 || items.length > 2 || items[0][0] !== 0x06) throw new Failure("malformed", `${what}: malformed AlgorithmIdentifier`);
  requireParameters(items, what);
}

function requireParameters(items, what) {
  const oid = oidOf(items[0]);
  if (HASH_OIDS.has(oid) && items.length === 2 && !(items[1].length === 2 && items[1][0] === 0x05 && items[1][1] === 0)) {
    throw new Failure("malformed", `${what}: hash parameters are not NULL`);
  }
  if (NO_PARAMETERS.has(oid) && items.length === 2) throw new Failure("malformed", `${what}: ${oid} takes no parameters`);
}

function requireExplicitInteger(tlv, what) {
  const inner = contentOf(tlv, what);
  if (inner[0] !== 0x02) throw new Failure("malformed", `${what}: not an INTEGER`);
  const value = readSingle(inner, what, 0x02);
  if (value.length === 0 || (value.length > 1 && ((value[0] === 0 && value[1] < 0x80) || (value[0] === 0xff && value[1] >= 0x80)))) {
    throw new Failure("malformed", `${what}: non-minimal INTEGER`);
  }
  if (value[0] >= 0x80) throw new Failure("malformed", `${what}: negative INTEGER`);
}

/** An AlgorithmIdentifier as a signature algorithm; RSASSA-PSS parameters parsed field by field. */
function requireSignatureAlgorithm(tlv, what) {
  const items = tlvs(contentOf(tlv, what), what);
  if (items.length === 0 || items.length > 2 || items[0][0] !== 0x06) throw new Failure("malformed", `${what}: malformed AlgorithmIdentifier`);
  if (oidOf(items[0]) !== RSASSA_PSS) {
    requireParameters(items, what);
    return;
  }
  if (items.length !== 2 || items[1][0] !== 0x30) throw new Failure("malformed", `${what}: RSASSA-PSS parameters are not a SEQUENCE`);
  let last = 0x9f;
  for (const field of tlvs(contentOf(items[1], what), what)) {
    // [0]..[3], each at most once and in order (a SEQUENCE, not a SET).
    if (field[0] < 0xa0 || field[0] > 0xa3 || field[0] <= last) {
      throw new Failure("malformed", `${what}: unexpected RSASSA-PSS parameter 0x${field[0].toString(16)}`);
    }
    last = field[0];
    if (field[0] === 0xa0) requireHashAlgorithm(contentOf(field, what), what);
    else if (field[0] === 0xa1) {
      const mgf = contentOf(field, what);
      if (mgf[0] !== 0x30) throw new Failure("malformed", `${what}: mask generation is not a SEQUENCE`);
      const parts = tlvs(contentOf(mgf, what), what);
      if (parts.length !== 2 || parts[0][0] !== 0x06) throw new Failure("malformed", `${what}: malformed mask generation algorithm`);
      if (oidOf(parts[0]) === MGF1) requireHashAlgorithm(parts[1], what);
    } else requireExplicitInteger(field, what);
  }
}

function requireNames(name, what) {
  for (const entry of name.typesAndValues) {
    const block = entry.value;
    const tag = block.idBlock.tagNumber;
    if (block.idBlock.tagClass !== 1 || block.idBlock.isConstructed || !NAME_VALUE_TAGS.has(tag)) throw new Failure("malformed", `${what}: attribute value of tag ${tag} is not a string`);
    const raw = new Uint8Array(block.valueBlock.valueHexView || new ArrayBuffer(0));
    if (tag === 19 && !PRINTABLE.test(String.fromCharCode(...raw))) throw new Failure("malformed", `${what}: PrintableString with characters it cannot hold`);
    if (tag === 22 && raw.some((b) => b >= 0x80)) throw new Failure("malformed", `${what}: IA5String with non-ASCII bytes`);
    if ((tag === 28 && raw.length % 4) || (tag === 30 && raw.length % 2)) throw new Failure("malformed", `${what}: a string of the wrong length for its type`);
    if (tag === 12) {
      try {
        new TextDecoder("utf-8", { fatal: true }).decode(raw);
      } catch {
        throw new Failure("malformed", `${what}: UTF8String that is not UTF-8`);
      }
    }
  }
}

function requireTime(tlv, what) {
  const raw = String.fromCharCode(...readSingle(tlv, what));
  const pattern = tlv[0] === 0x17 ? /^(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)Z$/ : /^\d\d(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)Z$/;
  const match = (tlv[0] === 0x17 || tlv[0] === 0x18) && pattern.exec(raw);
  const valid = match && Number(match[2]) >= 1 && Number(match[2]) <= 12 && Number(match[3]) >= 1 && Number(match[3]) <= 31
    && Number(match[4]) <= 23 && Number(match[5]) <= 59 && Number(match[6]) <= 59;
  if (!valid) throw new Failure("malformed", `${what}: validity time ${JSON.stringify(raw)} is not a valid UTCTime/GeneralizedTime`);
}

function requireStrictParts(certificate, outer, what) {
  if (![0, 1, 2].includes(certificate.version)) throw new Failure("malformed", `${what}: ${certificate.version} is not a valid X509 version`);
  const tbsParts = outer[0].valueBlock.value;
  const tbsAlgorithm = tbsParts.find((part) => part.idBlock.tagClass === 1 && part.idBlock.tagNumber === 16);
  for (const part of [tbsAlgorithm, outer[1]]) {
    if (part) requireSignatureAlgorithm(new Uint8Array(part.valueBeforeDecodeView), what);
  }
  requireNames(certificate.subject, `${what}: subject`);
  requireNames(certificate.issuer, `${what}: issuer`);
  // TBS: [0] version (optional), serial, signature, issuer, validity, subject, ...
  const first = tbsParts[0].idBlock.tagClass === 3 ? 1 : 0;
  const validity = tbsParts[first + 3];
  for (const time of validity.valueBlock.value) requireTime(new Uint8Array(time.valueBeforeDecodeView), `${what}: validity`);
  const signature = outer[2].valueBlock;
  const tail = new Uint8Array(signature.valueHexView);
  if (signature.unusedBits > 7 || (signature.unusedBits > 0 && (tail.length === 0 || tail[tail.length - 1] & ((1 << signature.unusedBits) - 1)))) {
    throw new Failure("malformed", `${what}: the signature BIT STRING has non-zero padding bits`);
  }
  if (certificate.subjectPublicKeyInfo.subjectPublicKey.valueBlock.unusedBits !== 0) {
    throw new Failure("malformed", `${what}: public key cannot be decoded: the BIT STRING has unused bits`);
  }
}
