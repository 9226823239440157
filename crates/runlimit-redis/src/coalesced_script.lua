
return coalesced()
