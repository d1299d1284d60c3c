#include <cstdio>
__global__ void k(int*p){*(volatile int*)8=1;}
#define P(x) {int a=(int)(x);int b=(int)cudaGetLastError();printf("%-44s %3d last %3d\n",#x,a,b);}
int main(){int*d;void*h;cudaStream_t s2;cudaEvent_t e,e2;static char r[8192];int v;unsigned f;size_t z;
cudaMalloc(&d,4);cudaMallocHost(&h,64);cudaStreamCreate(&s2);cudaEventCreate(&e);cudaEventCreate(&e2);cudaHostRegister(r,8192,0);
k<<<1,1>>>(d);P(cudaDeviceSynchronize());P(cudaGetLastError());
P(cudaEventDestroy(e));P(cudaFreeHost(h));P(cudaHostUnregister(r));P(cudaStreamGetPriority(s2,&v));P(cudaStreamGetFlags(s2,&f));
P(cudaDeviceSetCacheConfig(cudaFuncCachePreferL1));P(cudaGetDevice(&v));P(cudaSetDevice(0));P(cudaGetDeviceCount(&v));
P(cudaDeviceGetAttribute(&v,cudaDevAttrMultiProcessorCount,0));P(cudaDeviceGetLimit(&z,cudaLimitStackSize));P(cudaEventQuery(e2));
P(cudaStreamDestroy(s2));P(cudaFree(d));P(cudaEventDestroy(e2));}
