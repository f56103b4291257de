/* GPU host probe: what the real driver answers for an export table it does not have (curelay must answer alike). */
#include <cuda.h>
#include <stdio.h>

int main(void) {
  cuInit(0);
  CUuuid unknown = {{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x0f, 0xed, 0xcb, 0xa9, 0x87, 0x65, 0x43, 0x21}};
  const void* table = (const void*)0x1;
  CUresult result = cuGetExportTable(&table, &unknown);
  printf("unknown export table: result %d, table %p\n", (int)result, table);
  return 0;
}
