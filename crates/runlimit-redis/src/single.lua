-- One check or batch: the whole of KEYS and ARGV.
return admit(0, #KEYS, 0)
