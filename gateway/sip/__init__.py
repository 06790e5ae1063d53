"""Direct SIP: the parts of the SIP leg with one job each (dialogs, media guard, auth, SRTP, trunks)."""
