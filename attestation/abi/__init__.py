"""The SEV-SNP report ABI: product lines, TCB_VERSION layouts, the 1184-byte report and its
signature format. Pure byte layouts; nothing here decides trust."""
