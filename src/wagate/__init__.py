"""wagate: outbound WhatsApp gateway."""
