# Deterministic text for tools/run-region-preload-demo.sh: lines of a 9-digit key and 4 to 12
# common English words, drawn by the Park-Miller generator from -v seed=N, until -v target=BYTES
# bytes are written. The same seed and target give the same file on any machine (the
# generator's products stay below 2^53, exact in awk's doubles).
BEGIN {
  nw = split("the of and to in is that for it as was with be by on not he this are or his " \
             "from at which but have an they you were her she there been one all we their " \
             "has would when if so no will more can out up who them some time could into its " \
             "then two my than only other new these also any may like now over such our man " \
             "me even most made after many must before years where through back much well " \
             "way down should because each just those people how too little state good very " \
             "make world still see own men work long here get both between life being under " \
             "never day same another know while last might us great old year off come since " \
             "against go came right used take three", w, " ")
  x = seed
  while (bytes < target) {
    x = (x * 16807) % 2147483647
    line = sprintf("%09d", x % 1000000000)
    words = 4 + x % 9
    for (i = 0; i < words; i++) {
      x = (x * 16807) % 2147483647
      line = line " " w[1 + x % nw]
    }
    print line
    bytes += length(line) + 1
  }
}
